package main

import (
	"github.com/allox-os/allox/services/internal/daemon"
	"github.com/allox-os/allox/services/internal/plugin"
)

// knownPlugins lists every plugin this daemon knows, in load order — the seed's order:
// process-tree, session share, session network, system effects, the monitor — and then the
// Probe's dialog channel, each enabled by its own flag. A plugin is installed when mkimage linked it in (the image spec's
// plugins = ["..."] sets its build tag, whose file sets its install function); one that is not
// installed stays in the list with no Open, so that enabling it names the spec line to add.
func knownPlugins(cfg daemon.Config) []plugin.Plugin {
	known := []plugin.Plugin{
		{Manifest: plugin.Manifest{Name: "process-tree"}, Flag: "--process-tree-provider=ebpf",
			Enabled: cfg.ProcessTreeProvider == daemon.ProviderEBPF},
		{Manifest: plugin.Manifest{Name: "session-share"}, Flag: "--share-tools", Enabled: cfg.ShareTools},
		{Manifest: plugin.Manifest{Name: "session-network"}, Flag: "--session-network isolated|proxy",
			Enabled: cfg.SessionNetworkOn(), SessionParams: []string{"network"}},
		{Manifest: plugin.Manifest{Name: "system-effects"}, Flag: "--observer", Enabled: cfg.Observer,
			StartParams: []string{"recovery", "checkpoint_id"}},
		{Manifest: plugin.Manifest{Name: "monitor"}, Flag: "--monitor-root", Enabled: cfg.MonitorRoot != "",
			StartParams: []string{"traceparent"}},
		{Manifest: plugin.Manifest{Name: "dialog"}, Flag: "--dialog", Enabled: cfg.Dialog},
	}
	for i, install := range []func(daemon.Config, *plugin.Plugin){installProcessTree, installSessionShare, installSessionNetwork, installSystemEffects, installMonitor, installDialog} {
		if install != nil {
			install(cfg, &known[i])
		}
	}
	return known
}
