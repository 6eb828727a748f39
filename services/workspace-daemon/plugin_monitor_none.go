//go:build !allox_monitor

package main

import (
	"github.com/allox-os/allox/services/internal/daemon"
	"github.com/allox-os/allox/services/internal/plugin"
)

// installMonitor is nil: without the allox_monitor tag the monitor plugin is not linked in, and
// --monitor-root is refused naming the spec line.
var installMonitor func(daemon.Config, *plugin.Plugin)
