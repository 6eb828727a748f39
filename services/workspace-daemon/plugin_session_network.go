//go:build allox_session_network

package main

import (
	"context"
	"path/filepath"

	"github.com/allox-os/allox/services/internal/daemon"
	"github.com/allox-os/allox/services/internal/plugin"
	"github.com/allox-os/allox/services/internal/sessionnet"
)

// installSessionNetwork links in the session-network plugin: mkimage builds the daemon with the
// allox_session_network tag for a service with plugins = ["session-network"]. Opened, it keeps
// each network-mode session's namespace, has the broker serve proxy-mode sessions' proxies, owns
// session.create's "network" and serves network.connect, network.audit and network.reload.
var installSessionNetwork = func(cfg daemon.Config, p *plugin.Plugin) {
	p.API, p.Version, p.SessionParams = plugin.APIVersion, sessionnet.Version, sessionnet.SessionParams
	p.Open = func(ctx context.Context, core plugin.Core) (*plugin.Contribution, error) {
		scfg := sessionnet.Config{Default: sessionnet.Mode(cfg.SessionNetwork), Policy: cfg.SessionNetworkPolicy, HUP: true}
		if cfg.SessionNetworkModes != nil {
			for _, m := range cfg.SessionNetworkModes {
				scfg.Allowed = append(scfg.Allowed, sessionnet.Mode(m))
			}
		}
		broker, err := newSessionBroker(cfg.SessionNetworkPolicy, filepath.Join(core.State, "audit"), core)
		if err != nil {
			return nil, err
		}
		open, err := sessionnet.New(scfg, sessionNamespaces{}, broker)
		if err != nil {
			return nil, err
		}
		c, err := open(ctx, core)
		if err != nil {
			return nil, err
		}
		stopBroker(broker, c)
		return c, nil
	}
}
