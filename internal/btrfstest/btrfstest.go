// Package btrfstest gives tests a real Btrfs filesystem: a loop-mounted image, never a fake. Tests
// that need one skip without root, loop devices or btrfs-progs, and fail instead when CI=true.
package btrfstest

import (
	"errors"
	"fmt"
	"github.com/allox-os/allox/internal/testenv"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// New makes a 1 GiB Btrfs image below parent ("" = the system temp dir), mounts it and returns the
// mount point and a cleanup that unmounts and removes it. It is for TestMain; tests use Mount.
func New(parent string) (mnt string, cleanup func(), err error) { return NewSize(parent, "1G") }

// NewSize is New with an image of size bytes (truncate(1) syntax, e.g. "4G").
func NewSize(parent, size string) (mnt string, cleanup func(), err error) {
	nop := func() {}
	if why := missing(); why != "" {
		return "", nop, errors.New(why)
	}
	tmp, err := os.MkdirTemp(parent, "btrfs-")
	if err != nil {
		return "", nop, err
	}
	img, mnt := filepath.Join(tmp, "fs.img"), filepath.Join(tmp, "mnt")
	rm := func() { os.RemoveAll(tmp) }
	// Traversable, as a real store's parents are: sandboxed runs start as an unprivileged uid,
	// which must reach the workspace it binds.
	if err := os.Chmod(tmp, 0o711); err != nil {
		rm()
		return "", nop, err
	}
	for _, argv := range [][]string{{"truncate", "-s", size, img}, {"mkfs.btrfs", "-q", img}, {"mkdir", mnt}, {"mount", "-o", "loop", img, mnt}} {
		if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
			rm()
			return "", nop, fmt.Errorf("%v: %v: %s", argv, err, out)
		}
	}
	return mnt, func() { _ = exec.Command("umount", "-l", mnt).Run(); rm() }, nil
}

// Mount gives the test its own Btrfs filesystem below /var/tmp (not /tmp: every sandbox mounts a
// private /tmp over it), unmounted when the test ends.
func Mount(tb testing.TB) string {
	tb.Helper()
	Need(tb)
	mnt, cleanup, err := New("/var/tmp")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(cleanup)
	return mnt
}

// Need skips the test (or fails it when CI=true) unless a Btrfs filesystem can be made here.
func Need(tb testing.TB) {
	tb.Helper()
	why := missing()
	if why == "" {
		return
	}
	testenv.Unavailable(tb, "%s; run go test as root (make test does)", why)
}

func missing() string {
	switch {
	case os.Geteuid() != 0:
		return "needs root to loop-mount a Btrfs image"
	case func() bool { _, err := os.Stat("/dev/loop-control"); return err != nil }():
		return "needs loop devices (/dev/loop-control)"
	case func() bool { _, err := exec.LookPath("mkfs.btrfs"); return err != nil }():
		return "needs mkfs.btrfs (apt-get install btrfs-progs)"
	}
	return ""
}
