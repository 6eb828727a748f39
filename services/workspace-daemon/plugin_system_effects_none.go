//go:build !allox_system_effects

package main

import (
	"github.com/allox-os/allox/services/internal/daemon"
	"github.com/allox-os/allox/services/internal/plugin"
)

// installSystemEffects is nil: without the allox_system_effects tag the system-effects observer is
// not linked in, and --observer is refused naming the spec line.
var installSystemEffects func(daemon.Config, *plugin.Plugin)
