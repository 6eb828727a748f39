//go:build allox_system_effects

package main

import (
	"context"
	"path/filepath"

	"github.com/allox-os/allox/services/internal/daemon"
	"github.com/allox-os/allox/services/internal/effects/lifecycle"
	"github.com/allox-os/allox/services/internal/plugin"
)

// installSystemEffects links in the system-effects observer: mkimage builds the daemon with the
// allox_system_effects tag for a service with plugins = ["system-effects"]. Opened, it starts its
// standby observer, owns process.start's recovery and checkpoint_id, watches every run and serves
// the host-only observer.abort.
var installSystemEffects = func(cfg daemon.Config, p *plugin.Plugin) {
	p.API, p.Version, p.StartParams = plugin.APIVersion, lifecycle.Version, lifecycle.StartParams
	p.Open = func(_ context.Context, core plugin.Core) (*plugin.Contribution, error) {
		lp, err := lifecycle.New(lifecycle.Config{Libexec: cfg.ObserverLibexec, Pins: cfg.ObserverPins, Scope: cfg.ObserverScope,
			Evidence: filepath.Join(cfg.State, "effects"), StoreRoot: cfg.Root, StoreState: cfg.State}, core.Workspace)
		if err != nil {
			return nil, err
		}
		return lp.Contribution(), nil
	}
}
