package scrub

import (
	"context"
	"fmt"
	"os"

	"github.com/allox-os/allox/internal/cgroup"
)

// Runtime scrubs one run: it kills and removes the cgroup subtree at
// runCgroup and removes the staging directory (both may already be gone).
// ctx bounds the wait for the subtree to empty.
func Runtime(ctx context.Context, runCgroup, staging string) error {
	g, err := cgroup.At(runCgroup)
	if err == nil {
		err = g.DeleteTree(ctx)
	}
	if err != nil {
		return fmt.Errorf("scrub run cgroup %s: %w", runCgroup, err)
	}
	if staging != "" {
		if err := os.RemoveAll(staging); err != nil {
			return fmt.Errorf("scrub run staging %s: %w", staging, err)
		}
	}
	return nil
}
