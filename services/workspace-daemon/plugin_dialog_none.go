//go:build !allox_dialog

package main

import (
	"github.com/allox-os/allox/services/internal/daemon"
	"github.com/allox-os/allox/services/internal/plugin"
)

// installDialog is nil: without the allox_dialog tag the dialog plugin is not linked in, and
// --dialog is refused naming the spec line.
var installDialog func(daemon.Config, *plugin.Plugin)
