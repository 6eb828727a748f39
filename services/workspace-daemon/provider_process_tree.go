//go:build allox_process_tree

package main

import (
	"github.com/allox-os/allox/services/internal/proctree"
	"github.com/allox-os/allox/services/internal/tracker"
)

// openProcessTree loads the eBPF process-tree provider. It is linked in because the daemon was built
// with the allox_process_tree tag, which mkimage sets for a service with plugins = ["process-tree"].
var openProcessTree = func() (tracker.Collector, error) {
	col, err := proctree.Open()
	if err != nil {
		return nil, err // not a typed nil in the interface
	}
	return col, nil
}
