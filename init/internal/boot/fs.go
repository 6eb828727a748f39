package boot

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Mount mounts a filesystem, creating its mount point first.
type Mount struct {
	Source, Target, FSType string
	Flags                  uintptr
	Data                   string
}

func (m Mount) String() string {
	opts := flagNames(m.Flags)
	if m.Data != "" {
		opts = append(opts, m.Data)
	}
	o := ""
	if len(opts) > 0 {
		o = " -o " + strings.Join(opts, ",")
	}
	return fmt.Sprintf("mount -t %s%s %s %s", m.FSType, o, m.Source, m.Target)
}

// Run creates the target (which must already exist on a read-only root) and mounts.
// A filesystem already mounted there is a skip.
func (m Mount) Run(_ context.Context, sys *Sys) error {
	target := sys.Path(m.Target)
	if err := os.MkdirAll(target, 0o755); err != nil {
		return fmt.Errorf("create mount point: %w", err)
	}
	err := sys.Mount(m.Source, target, m.FSType, m.Flags, m.Data)
	if errors.Is(err, unix.EBUSY) {
		// The kernel refuses the same filesystem twice on one mount point: a kernel with
		// CONFIG_DEVTMPFS_MOUNT has mounted /dev already.
		return fmt.Errorf("%w: %s is already mounted on %s", ErrSkipped, m.FSType, m.Target)
	}
	if err != nil {
		return fmt.Errorf("mount: %w", err)
	}
	sys.mounted(target)
	return nil
}

var flagTable = []struct {
	bit  uintptr
	name string
}{
	{unix.MS_RDONLY, "ro"}, {unix.MS_NOSUID, "nosuid"}, {unix.MS_NODEV, "nodev"},
	{unix.MS_NOEXEC, "noexec"}, {unix.MS_NOATIME, "noatime"},
}

func flagNames(flags uintptr) []string {
	var names []string
	for _, f := range flagTable {
		if flags&f.bit != 0 {
			names = append(names, f.name)
			flags &^= f.bit
		}
	}
	if flags != 0 {
		names = append(names, fmt.Sprintf("%#x", flags))
	}
	return names
}

// Dir creates a directory and its parents.
type Dir struct {
	Path string
	Mode fs.FileMode
}

func (d Dir) String() string { return fmt.Sprintf("mkdir -p -m %04o %s", d.Mode.Perm(), d.Path) }

// Run creates the directory; the mode applies to the last element whatever the umask.
func (d Dir) Run(_ context.Context, sys *Sys) error {
	p := sys.Path(d.Path)
	if err := os.MkdirAll(p, d.Mode); err != nil {
		return err
	}
	return os.Chmod(p, d.Mode)
}

// Symlink creates Link pointing at Target unless something already exists at Link.
type Symlink struct {
	Target, Link string
}

func (l Symlink) String() string { return fmt.Sprintf("ln -s %s %s", l.Target, l.Link) }

// Run leaves an existing entry alone (devtmpfs may already provide it).
func (l Symlink) Run(_ context.Context, sys *Sys) error {
	p := sys.Path(l.Link)
	if _, err := os.Lstat(p); err == nil {
		return nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	return os.Symlink(l.Target, p)
}
