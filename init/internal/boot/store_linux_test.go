package boot

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// realSys is Kernel() rooted at a temporary directory: real loop devices, mkfs.btrfs and mounts.
func realSys(t *testing.T) *Sys {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root for loop devices and mount(2); run: sudo go test ./init/internal/boot -run Real")
	}
	if _, err := LookPath("/", "mkfs.btrfs"); err != nil {
		t.Skipf("%v", err)
	}
	// No reaper runs in this test process: exec.Cmd.CombinedOutput may wait for the child itself.
	sys := Kernel(func(_ context.Context, cmd *exec.Cmd) ([]byte, error) { return cmd.CombinedOutput() })
	sys.Root, sys.StoreWait = t.TempDir(), 0
	return sys
}

func unmountAtCleanup(t *testing.T, sys *Sys) {
	t.Cleanup(func() {
		mounts := sys.Mounts()
		for i := len(mounts) - 1; i >= 0; i-- {
			if err := unix.Unmount(mounts[i], 0); err != nil {
				t.Errorf("unmount %s: %v", mounts[i], err)
			}
		}
	})
}

func assertBtrfs(t *testing.T, dir string) {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	if st.Type != unix.BTRFS_SUPER_MAGIC {
		t.Fatalf("%s: filesystem type %#x, want btrfs", dir, st.Type)
	}
	if err := os.WriteFile(filepath.Join(dir, "probe"), []byte("x"), 0o644); err != nil {
		t.Fatalf("store not writable: %v", err)
	}
}

func TestRealStoreFallback(t *testing.T) {
	sys := realSys(t)
	var loop string
	attach := sys.Loop
	sys.Loop = func(file string) (string, func() error, error) {
		dev, release, err := attach(file)
		loop = dev
		return dev, release, err
	}
	store := testStore
	store.FallbackSizeMiB = 256
	err := Store{store}.Run(context.Background(), sys)
	if len(sys.Mounts()) > 0 {
		unmountAtCleanup(t, sys)
	}
	if err != nil {
		t.Fatal(err)
	}
	mp := sys.Path(store.Mountpoint)
	assertBtrfs(t, mp)
	if err := unix.Unmount(mp, 0); err != nil {
		t.Fatal(err)
	}
	sys.mounts = nil
	// LO_FLAGS_AUTOCLEAR: the loop device lets go of the image once the store is unmounted.
	backing := fmt.Sprintf("/sys/block/%s/loop/backing_file", filepath.Base(loop))
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(backing); errors.Is(err, os.ErrNotExist) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still attached 5s after unmount", loop)
		}
	}
}

// TestRealStoreDisk plays the virtio disk with a loop device linked at <root>/dev/vdb.
func TestRealStoreDisk(t *testing.T) {
	sys := realSys(t)
	img := image(t, 300<<20, nil)
	dev, release, err := AttachLoop(img)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { release() })
	write(t, sys.Root, "/sys/block/vdb/serial", "allox-ws")
	linkDisk(t, sys, dev)
	formats := 0
	mkfs := sys.Mkfs
	sys.Mkfs = func(ctx context.Context, dev, label string, mixed bool) error {
		formats++
		return mkfs(ctx, dev, label, mixed)
	}
	mp := sys.Path(testStore.Mountpoint)
	for boot := 1; boot <= 2; boot++ { // first boot formats the blank disk, the second mounts it
		if err := (Store{testStore}).Run(context.Background(), sys); err != nil {
			t.Fatalf("boot %d: %v", boot, err)
		}
		assertBtrfs(t, mp)
		if err := unix.Unmount(mp, 0); err != nil {
			t.Fatal(err)
		}
	}
	if formats != 1 {
		t.Errorf("mkfs ran %d times over two boots, want 1", formats)
	}
}

func TestRealStoreRefusesExt4(t *testing.T) {
	sys := realSys(t)
	img := image(t, 64<<20, nil)
	tool(t, "mkfs.ext4", "-q", "-F", img)
	before, _ := os.ReadFile(img)
	write(t, sys.Root, "/sys/block/vdb/serial", "allox-ws")
	linkDisk(t, sys, img)
	err := Store{testStore}.Run(context.Background(), sys)
	if err == nil || !strings.Contains(err.Error(), "refusing to format it") {
		t.Fatalf("Run = %v, want a refusal", err)
	}
	if after, _ := os.ReadFile(img); string(after) != string(before) {
		t.Fatal("the ext4 image was modified")
	}
}

func linkDisk(t *testing.T, sys *Sys, target string) {
	t.Helper()
	if err := os.MkdirAll(sys.Path("/dev"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, sys.Path("/dev/vdb")); err != nil {
		t.Fatal(err)
	}
}
