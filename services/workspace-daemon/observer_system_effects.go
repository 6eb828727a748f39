//go:build allox_system_effects

package main

import (
	"path/filepath"

	"github.com/allox-os/allox/services/internal/daemon"
	"github.com/allox-os/allox/services/internal/effects/lifecycle"
	"github.com/allox-os/allox/services/internal/workspace"
)

// openObserver sets up the system-effects observer. It is linked in because the daemon was built
// with the allox_system_effects tag, which mkimage sets for a service with
// plugins = ["system-effects"]. It registers the plugin's host-only observer.abort action.
var openObserver = func(cfg daemon.Config, ws *workspace.Service, r *daemon.Router) (daemon.RunHook, error) {
	p, err := lifecycle.New(lifecycle.Config{Libexec: cfg.ObserverLibexec, Pins: cfg.ObserverPins, Scope: cfg.ObserverScope,
		Evidence: filepath.Join(cfg.State, "effects"), StoreRoot: cfg.Root, StoreState: cfg.State}, ws)
	if err != nil {
		return nil, err
	}
	if err := p.Register(r); err != nil {
		return nil, err
	}
	return p, nil
}
