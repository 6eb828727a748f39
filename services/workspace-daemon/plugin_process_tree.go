//go:build allox_process_tree

package main

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/allox-os/allox/services/internal/daemon"
	"github.com/allox-os/allox/services/internal/plugin"
	"github.com/allox-os/allox/services/internal/proctree"
	"github.com/allox-os/allox/services/internal/tracker"
)

// processTreeVersion is the process-tree plugin's own version.
const processTreeVersion = "1.0.0"

// installProcessTree links in the eBPF process-tree provider: mkimage builds the daemon with the
// allox_process_tree tag for a service with plugins = ["process-tree"]. Opened, it loads the eBPF
// collector (refusing to go on if that fails: the provider was asked for), serves process.tree and
// process.events from its history and registers every run with the collector before the run's
// command is released (its run hook).
var installProcessTree = func(cfg daemon.Config, p *plugin.Plugin) {
	p.API, p.Version = plugin.APIVersion, processTreeVersion
	p.Open = func(_ context.Context, core plugin.Core) (*plugin.Contribution, error) {
		col, err := proctree.Open()
		if err != nil {
			return nil, fmt.Errorf("load the eBPF process-tree provider (needs root and kernel BTF): %w", err)
		}
		// The records keep the directory they had before Plugin API v1.
		tr, err := tracker.NewEBPF(core.Workspace, col, filepath.Join(cfg.State, "proctree"))
		if err != nil {
			col.Close()
			return nil, err
		}
		hook := tr.RunHook()
		return &plugin.Contribution{
			Actions: daemon.TrackerActions(core.Workspace, tr),
			Run:     func(context.Context, *plugin.RunStart) (plugin.RunHook, error) { return hook, nil },
			Close:   tr.Close,
		}, nil
	}
}
