package boot

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"strings"
)

// Controllers enables, one by one, every controller listed in Dir/cgroup.controllers for the
// children of Dir (the daemon delegates cpu, memory, pids, cpuset and io to its workspaces).
type Controllers struct {
	Dir string
}

func (c Controllers) String() string {
	return "enable cgroup controllers in " + path.Join(c.Dir, "cgroup.subtree_control")
}

// Run writes "+name" for each available controller and names the ones the kernel refused.
func (c Controllers) Run(_ context.Context, sys *Sys) error {
	avail, err := os.ReadFile(sys.Path(path.Join(c.Dir, "cgroup.controllers")))
	if err != nil {
		return err
	}
	control := sys.Path(path.Join(c.Dir, "cgroup.subtree_control"))
	var enabled, failed []string
	var errs []error
	for _, name := range strings.Fields(string(avail)) {
		if err := writeControl(control, "+"+name); err != nil {
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

func writeControl(file, word string) error {
	f, err := os.OpenFile(file, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, werr := f.WriteString(word)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	return werr
}
