//go:build allox_monitor

package main

import (
	"context"

	"github.com/allox-os/allox/services/internal/daemon"
	"github.com/allox-os/allox/services/internal/monitor"
	"github.com/allox-os/allox/services/internal/netns"
	"github.com/allox-os/allox/services/internal/plugin"
)

// installMonitor links in the monitor plugin: mkimage builds the daemon with the allox_monitor
// tag for a service with plugins = ["monitor"]. Opened (--monitor-root), it serves each session's
// OTLP receiver, sets OTEL_EXPORTER_OTLP_ENDPOINT in every run, records every run's resource use
// and serves monitor.span, .event, .metric, .records, .summary and .report.
var installMonitor = func(cfg daemon.Config, p *plugin.Plugin) {
	p.API, p.Version, p.StartParams = plugin.APIVersion, monitor.Version, monitor.StartParams
	p.Open = func(ctx context.Context, core plugin.Core) (*plugin.Contribution, error) {
		mcfg := monitor.Config{Root: cfg.MonitorRoot, Retention: monitor.Retention{SessionBytes: cfg.MonitorSessionBytes}}
		if cfg.MonitorExport != "" {
			exp, err := monitor.NewExporter(ctx, cfg.MonitorExport, core.Log)
			if err != nil {
				return nil, err
			}
			mcfg.Export = exp
		}
		m, err := monitor.Open(mcfg, core.Workspace, netns.Listen, core.Log)
		if err != nil {
			return nil, err
		}
		return m.Contribution(), nil
	}
}
