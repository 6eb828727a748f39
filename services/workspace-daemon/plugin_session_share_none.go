//go:build !allox_session_share

package main

import (
	"github.com/allox-os/allox/services/internal/daemon"
	"github.com/allox-os/allox/services/internal/plugin"
)

// installSessionShare is nil: without the allox_session_share tag the session-share plugin is
// not linked in, and --share-tools is refused naming the spec line.
var installSessionShare func(daemon.Config, *plugin.Plugin)
