// Package cgroupfs reads and writes a cgroup v2 group's own interface files with the standard
// library alone: the controllers a group has and enabling them for its children.
//
// It is what init needs of cgroups, kept apart from internal/cgroup (which wraps containerd's
// cgroup2 library and uses this package for the same two operations) so that PID 1 does not link
// that library: its package initialisers (protobuf, the BPF library, logrus, D-Bus) ran under
// TCG on every boot and on every service start through init's trampoline, for two file writes.
package cgroupfs

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

const (
	controllersFile    = "cgroup.controllers"
	subtreeControlFile = "cgroup.subtree_control"
)

// Controllers lists the controllers available in the group at dir (its cgroup.controllers).
func Controllers(dir string) ([]string, error) {
	b, err := os.ReadFile(filepath.Join(dir, controllersFile))
	if err != nil {
		return nil, fmt.Errorf("cgroup %s: %w", dir, err)
	}
	return strings.Fields(string(b)), nil
}

// EnableForChildren enables the controllers in dir's cgroup.subtree_control, in one write, so that
// the groups below dir get them. The kernel applies all or none of one write; a controller that is
// not available in dir fails it (ENOENT), as does a dir that holds processes (EBUSY, "no internal
// processes").
func EnableForChildren(dir string, controllers ...string) error {
	if len(controllers) == 0 {
		return nil
	}
	p := filepath.Join(dir, subtreeControlFile)
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("enable %s: %w", strings.Join(controllers, " "), err)
	}
	_, err = f.WriteString("+" + strings.Join(controllers, " +"))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("enable %s in %s: %w", strings.Join(controllers, " "), p, err)
	}
	return nil
}
