package history

import (
	"fmt"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// scope is a cgroup v2 directory: its id and its depth below the root.
type scope struct {
	id    uint64
	level uint32
}

// resolveScope finds the id of the cgroup at path (the inode number of its
// directory) and its level (the root cgroup is level 0), counting the
// directories up to the root of the cgroup2 mount. The mount must show the
// whole hierarchy, as it does outside a cgroup namespace: the kernel checks
// the level from the real root.
func resolveScope(path string) (scope, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return scope{}, fmt.Errorf("cgroup %s: %w", path, err)
	}
	var st unix.Stat_t
	if err := unix.Stat(abs, &st); err != nil {
		return scope{}, fmt.Errorf("cgroup %s: %w", path, err)
	}
	if err := isCgroup2(abs); err != nil {
		return scope{}, err
	}
	s := scope{id: st.Ino}
	for dir := abs; ; {
		parent := filepath.Dir(dir)
		if parent == dir || isCgroup2(parent) != nil {
			return s, nil
		}
		var pst unix.Stat_t
		if err := unix.Stat(parent, &pst); err != nil || pst.Dev != st.Dev {
			return s, nil
		}
		s.level++
		dir = parent
	}
}

func isCgroup2(path string) error {
	var fs unix.Statfs_t
	if err := unix.Statfs(path, &fs); err != nil {
		return fmt.Errorf("cgroup %s: %w", path, err)
	}
	if fs.Type != unix.CGROUP2_SUPER_MAGIC {
		return fmt.Errorf("cgroup %s (filesystem magic %#x, want cgroup2 %#x): %w",
			path, fs.Type, unix.CGROUP2_SUPER_MAGIC, ErrNotCgroup2)
	}
	return nil
}
