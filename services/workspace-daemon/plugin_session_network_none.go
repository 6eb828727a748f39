//go:build !allox_session_network

package main

import (
	"github.com/allox-os/allox/services/internal/daemon"
	"github.com/allox-os/allox/services/internal/plugin"
)

// installSessionNetwork is nil: without the allox_session_network tag the session-network plugin
// is not linked in, and --session-network isolated|proxy is refused naming the spec line.
var installSessionNetwork func(daemon.Config, *plugin.Plugin)
