//go:build !allox_process_tree

package main

import "github.com/allox-os/allox/services/internal/tracker"

// openProcessTree is nil: without the allox_process_tree tag the eBPF process-tree provider is not
// linked in, and --process-tree-provider=ebpf is refused with errProviderNotInstalled.
var openProcessTree func() (tracker.Collector, error)
