//go:build !allox_system_effects

package main

import (
	"github.com/allox-os/allox/services/internal/daemon"
	"github.com/allox-os/allox/services/internal/workspace"
)

// openObserver is nil: without the allox_system_effects tag the system-effects observer is not
// linked in, and --observer is refused with errObserverNotInstalled.
var openObserver func(cfg daemon.Config, ws *workspace.Service, r *daemon.Router) (daemon.RunHook, error)
