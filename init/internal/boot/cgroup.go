package boot

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"

	"github.com/allox-os/allox/internal/cgroupfs"
)

// Controllers enables, one by one, every controller listed in Dir/cgroup.controllers for the
// children of Dir (the daemon delegates cpu, memory, pids, cpuset and io to its workspaces).
type Controllers struct {
	Dir string
}

func (c Controllers) String() string {
	return "enable cgroup controllers in " + path.Join(c.Dir, "cgroup.subtree_control")
}

// Run enables each available controller and names the ones the kernel refused.
func (c Controllers) Run(_ context.Context, sys *Sys) error {
	dir := sys.Path(c.Dir)
	avail, err := cgroupfs.Controllers(dir)
	if err != nil {
		return err
	}
	var enabled, failed []string
	var errs []error
	for _, name := range avail {
		if err := cgroupfs.EnableForChildren(dir, name); err != nil {
			failed = append(failed, name)
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
			continue
		}
		enabled = append(enabled, name)
	}
	if len(failed) > 0 {
		return fmt.Errorf("enabled [%s], failed [%s]: %w",
			strings.Join(enabled, " "), strings.Join(failed, " "), errors.Join(errs...))
	}
	return nil
}
