//go:build !allox_process_tree

package main

import (
	"github.com/allox-os/allox/services/internal/daemon"
	"github.com/allox-os/allox/services/internal/plugin"
)

// installProcessTree is nil: without the allox_process_tree tag the eBPF process-tree provider is
// not linked in, and --process-tree-provider=ebpf is refused naming the spec line.
var installProcessTree func(daemon.Config, *plugin.Plugin)
