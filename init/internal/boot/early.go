package boot

import (
	"context"

	"golang.org/x/sys/unix"
)

const (
	nosuid = unix.MS_NOSUID
	nodev  = unix.MS_NODEV
	noexec = unix.MS_NOEXEC
)

// LogDir is where init writes one log file per service (on the /run tmpfs).
const LogDir = "/run/allox/log"

// Early is the table that needs no manifest: API filesystems, the writable tmpfs mounts (the
// root filesystem is read-only in image mode), /dev links and cgroup v2.
func Early() []Step {
	return []Step{
		RootMount{},
		Mount{"proc", "/proc", "proc", nosuid | nodev | noexec, ""},
		Mount{"sysfs", "/sys", "sysfs", nosuid | nodev | noexec, ""},
		Mount{"devtmpfs", "/dev", "devtmpfs", nosuid, "mode=0755"},
		Mount{"devpts", "/dev/pts", "devpts", nosuid | noexec, "newinstance,ptmxmode=0666,mode=0620,gid=5"},
		Mount{"shm", "/dev/shm", "tmpfs", nosuid | nodev, "mode=1777"},
		Mount{"run", "/run", "tmpfs", nosuid | nodev, "mode=0755"},
		Mount{"tmp", "/tmp", "tmpfs", nosuid | nodev, "mode=1777"},
		Dir{LogDir, 0o755},
		Opt{Symlink{"/proc/self/fd", "/dev/fd"}},
		Opt{Symlink{"/proc/self/fd/0", "/dev/stdin"}},
		Opt{Symlink{"/proc/self/fd/1", "/dev/stdout"}},
		Opt{Symlink{"/proc/self/fd/2", "/dev/stderr"}},
		Opt{Symlink{"pts/ptmx", "/dev/ptmx"}},
		Mount{"cgroup2", "/sys/fs/cgroup", "cgroup2", nosuid | nodev | noexec, "nsdelegate"},
		Opt{Controllers{"/sys/fs/cgroup"}},
		Opt{Mount{"bpf", "/sys/fs/bpf", "bpf", nosuid | nodev | noexec, "mode=0700"}},
		Opt{Mount{"tracefs", "/sys/kernel/tracing", "tracefs", nosuid | nodev | noexec, ""}},
	}
}

// RootMount turns an initramfs root into a mount of its own. The kernel's initial rootfs can
// never be pivoted away from, so without this every bubblewrap sandbox fails in initrd mode
// ("pivot_root: Invalid argument"); a recursive bind of / moved onto / can be. In image mode the
// root is already a real mount and nothing happens.
type RootMount struct{}

func (RootMount) String() string { return "make / a mount of its own if it is the initramfs" }

// Run calls Sys.LeaveRootfs; a root that already is a mount (image mode) is left alone.
func (RootMount) Run(_ context.Context, sys *Sys) error {
	if sys.LeaveRootfs == nil {
		return nil
	}
	_, err := sys.LeaveRootfs()
	return err
}
