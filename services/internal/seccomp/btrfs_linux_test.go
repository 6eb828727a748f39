package seccomp

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/allox-os/allox/internal/btrfstest"
)

// TestBtrfsSubvolumes runs btrfs-progs and raw ioctls (with high bits set in the request,
// which the kernel drops) against a real Btrfs bound writable into the sandbox: with the filter
// every subvolume and snapshot operation fails with EPERM and changes nothing; without it, in
// the same bwrap, each succeeds.
func TestBtrfsSubvolumes(t *testing.T) {
	needSandbox(t)
	mnt := btrfstest.Mount(t)
	for _, mode := range []struct {
		name     string
		filtered bool
	}{{"filtered", true}, {"control", false}} {
		t.Run(mode.name, func(t *testing.T) {
			dir := filepath.Join(mnt, mode.name)
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			for _, sv := range []string{"victim", "victim-del", "victim-del-cli"} {
				btrfs(t, "subvolume", "create", filepath.Join(dir, sv))
			}
			s := sandbox{filtered: mode.filtered, binds: []string{"--bind", dir, "/btrfs"}}
			for _, argv := range [][]string{
				{"btrfs", "subvolume", "create", "/btrfs/new"},
				{"btrfs", "subvolume", "snapshot", "/btrfs/victim", "/btrfs/snap"},
				{"btrfs", "subvolume", "snapshot", "-r", "/btrfs/victim", "/btrfs/snap-ro"},
				{"btrfs", "subvolume", "delete", "/btrfs/victim-del-cli"},
			} {
				t.Run(strings.Join(argv[1:3], "-")+"/"+filepath.Base(argv[len(argv)-1]), func(t *testing.T) {
					stdout, stderr, err := s.run(t, argv...)
					out := stdout + stderr
					switch {
					case mode.filtered && (err == nil || !strings.Contains(out, "Operation not permitted")):
						t.Errorf("%v in the filtered sandbox: %v, output %q; want it refused with \"Operation not permitted\"", argv, err, out)
					case !mode.filtered && err != nil:
						t.Errorf("control %v: %v, output %q; the operation must work without the filter", argv, err, out)
					}
				})
			}
			probes := []string{"btrfs/SUBVOL_CREATE-high-bits", "btrfs/SNAP_CREATE_V2-high-bits", "btrfs/SUBVOL_SETFLAGS", "btrfs/SNAP_DESTROY"}
			got := s.probe(t, []string{"-dir=/btrfs"}, probes...)
			for _, p := range probes {
				t.Run(p, func(t *testing.T) {
					want := syscall.Errno(0)
					if mode.filtered {
						want = syscall.EPERM
					}
					if e, ok := got[p]; !ok || e != want {
						t.Errorf("%s: %s (answered: %v), want %s", p, errnoName(e), ok, errnoName(want))
					}
				})
			}
			if mode.filtered {
				checkUnchanged(t, dir)
			}
		})
	}
}

// checkUnchanged fails if the filtered run left a trace on the filesystem.
func checkUnchanged(t *testing.T, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if got := strings.Join(names, " "); got != "victim victim-del victim-del-cli" {
		t.Errorf("after the filtered run %s holds %q, want only the three victims", dir, got)
	}
	if ro := btrfs(t, "property", "get", "-ts", filepath.Join(dir, "victim"), "ro"); strings.TrimSpace(ro) != "ro=false" {
		t.Errorf("victim's read-only flag after the filtered run: %q, want ro=false", ro)
	}
}

func btrfs(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("btrfs", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("btrfs %v: %v: %s", args, err, out)
	}
	return string(out)
}
