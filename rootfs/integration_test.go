package rootfs

import (
	"bytes"
	"context"
	"fmt"
	"github.com/allox-os/allox/internal/testenv"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/allox-os/allox/initramfs"
)

// defaultPackages is rootfs.packages of images/allox.hcl.
var defaultPackages = []string{"busybox", "bubblewrap", "btrfs-progs", "ca-certificates"}

// testLog sends mmdebstrap's output to t.Logf.
type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Logf("%s", bytes.TrimRight(p, "\n"))
	return len(p), nil
}

// fetchDefault builds (once per cache) the default userland with the real mmdebstrap.
func fetchDefault(t *testing.T) (string, []Package) {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: skipping the mmdebstrap build of the Debian userland; run go test ./rootfs without -short")
	}
	testenv.Tool(t, "mmdebstrap", "apt-get install mmdebstrap, then rerun go test ./rootfs")
	cache := filepath.Join(os.TempDir(), "allox-test-cache")
	start := time.Now()
	tarball, pkgs, err := Fetch(context.Background(), cache, DebianSpec{Suite: "bookworm", Packages: defaultPackages}, testLog{t})
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(tarball)
	must(t, err)
	t.Logf("userland %s: %d bytes, %d packages, in %v", tarball, fi.Size(), len(pkgs), time.Since(start).Round(time.Millisecond))
	return tarball, pkgs
}

func TestFetchDefaultUserland(t *testing.T) {
	tarball, pkgs := fetchDefault(t)
	for _, name := range defaultPackages {
		i := slices.IndexFunc(pkgs, func(p Package) bool { return p.Name == name })
		if i < 0 || pkgs[i].Version == "" || pkgs[i].Arch == "" {
			t.Errorf("package %s missing from the list %v", name, pkgs)
		}
	}
	reversed := slices.Clone(defaultPackages)
	slices.Reverse(reversed)
	again, pkgs2, err := Fetch(context.Background(), filepath.Dir(tarball), DebianSpec{Suite: "bookworm", Packages: reversed}, nil)
	if err != nil || again != tarball || len(pkgs2) != len(pkgs) {
		t.Errorf("second Fetch = %s (%d packages), %v; want the cached %s", again, len(pkgs2), err, tarball)
	}

	tr, err := Stage(tarball)
	if err != nil {
		t.Fatal(err)
	}
	var size int64
	for _, e := range tr.Entries() {
		size += e.Size
	}
	t.Logf("tree: %d entries, %d bytes of file contents", len(tr.Entries()), size)

	resolved := func(p string) initramfs.Entry {
		t.Helper()
		r, err := tr.Resolve(p)
		must(t, err)
		e, ok := tr.Lookup(r)
		if !ok {
			t.Errorf("%s (%s) is not in the userland", p, r)
		}
		return e
	}
	for _, p := range []string{"/usr/bin/bwrap", "/sbin/mkfs.btrfs", "/bin/busybox", "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2", "/etc/passwd", "/etc/group"} {
		if e := resolved(p); !e.Mode.IsRegular() || e.Size == 0 {
			t.Errorf("%s = %v, %d bytes; want a regular file", p, e.Mode, e.Size)
		}
	}
	if e := resolved("/bin/sh"); e.Link != "/bin/busybox" {
		t.Errorf("/bin/sh = %+v, want busybox's applet link", e)
	}
	if e := resolved("/etc/resolv.conf"); !e.Mode.IsRegular() || e.Size != 0 {
		t.Errorf("/etc/resolv.conf = %v, %d bytes; Kata needs an empty regular file", e.Mode, e.Size)
	}
	if e := resolved("/etc/ssl/certs/ca-certificates.crt"); !bytes.HasPrefix(e.Data, []byte("-----BEGIN CERTIFICATE-----")) || e.Size < 100000 {
		t.Errorf("CA bundle: %d bytes", e.Size)
	}
	if e := resolved("/lib64/ld-linux-x86-64.so.2"); e.Link == "" {
		t.Errorf("/lib64/ld-linux-x86-64.so.2 = %+v, want the dynamic loader's symlink", e)
	}
	for _, p := range []string{"/bin", "/sbin", "/lib", "/lib64"} {
		if e, _ := tr.Lookup(p); e.Link != "usr"+p {
			t.Errorf("%s = %+v, want the merged-/usr symlink to usr%s", p, e, p)
		}
	}
	for _, p := range []string{"/usr/share/man", "/usr/share/locale", "/etc/hostname", "/usr/share/doc/busybox/changelog.Debian.gz", "/usr/lib/x86_64-linux-gnu/gconv"} {
		if _, ok := tr.Lookup(p); ok {
			t.Errorf("%s is in the userland; the recipe drops it", p)
		}
	}
	if _, ok := tr.Lookup("/usr/share/doc/busybox/copyright"); !ok {
		t.Error("copyright files must stay")
	}
}

// TestDefaultImage builds the default image's root disk from the real userland and boots nothing:
// e2fsck, then a chroot into the mounted image runs the tools the image is for.
func TestDefaultImage(t *testing.T) {
	tarball, _ := fetchDefault(t)
	tr, err := Stage(tarball)
	must(t, err)
	initBin := filepath.Join(t.TempDir(), "init")
	must(t, os.WriteFile(initBin, []byte("#!/bin/sh\necho allox init\n"), 0o755))
	o := Overlay{
		Binaries:    []Binary{{Path: "/sbin/init", Source: initBin}},
		Manifest:    []byte("{}\n"),
		Hostname:    "allox",
		Mountpoints: append(DefaultMountpoints, "/var/lib/allox/workspaces"),
	}
	must(t, o.Apply(tr))

	img := filepath.Join(t.TempDir(), "allox.img")
	start := time.Now()
	_, err = WriteDisk(context.Background(), img, tr, testOptions)
	must(t, err)
	fi, err := os.Stat(img)
	must(t, err)
	t.Logf("disk image: %d MiB (automatic size) in %v", fi.Size()/mib, time.Since(start).Round(time.Millisecond))
	tool(t, nil, "e2fsck", "-fn", partitionOf(t, img))
	again := filepath.Join(t.TempDir(), "again.img")
	_, err = WriteDisk(context.Background(), again, tr, testOptions)
	must(t, err)
	if !sameFile(t, img, again) {
		t.Error("two WriteDisk runs of the default userland differ")
	}

	var cpio bytes.Buffer
	must(t, initramfs.Write(&cpio, tr, epoch))
	t.Logf("initramfs of the same tree: %d bytes", cpio.Len())

	if os.Geteuid() != 0 {
		t.Skip("mounting and chroot need root: run go test as root (CI does)")
	}
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		t.Skip("no loop devices (/dev/loop-control) to mount the image; run on a host or VM that has them")
	}
	mnt := t.TempDir()
	tool(t, nil, "mount", "-t", "ext4", "-o", "ro,loop,offset=1048576,data=ordered,errors=remount-ro", img, mnt)
	t.Cleanup(func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount: %v %s", err, out)
		}
	})
	out, err := exec.Command("chroot", mnt, "/bin/sh", "-c",
		"cat /sbin/init && bwrap --version && mkfs.btrfs --version && busybox ls /etc/allox && test -s /etc/ssl/certs/ca-certificates.crt && echo ok").CombinedOutput()
	if err != nil || !strings.HasSuffix(string(out), "ok\n") {
		t.Errorf("chroot into the image: %v\n%s", err, out)
	}
	t.Logf("in the image:\n%s", out)

	// Real bubblewrap needs a real root mount, not a chroot: pivot into the image (its /tmp, a
	// mountpoint directory, holds the old root) in a private mount namespace.
	inner := "umount -l /tmp && bwrap --ro-bind / / --proc /proc --dev /dev --unshare-pid --unshare-net /bin/sh -c 'echo sandboxed pid $$'"
	script := fmt.Sprintf("mount -t proc proc %[1]s/proc && cd %[1]s && pivot_root . tmp && exec chroot . /bin/sh -c %[2]s", mnt, shellJoin([]string{inner}))
	out, err = exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c", script).CombinedOutput()
	if err != nil || string(out) != "sandboxed pid 2\n" {
		t.Errorf("bwrap inside the image: %v\n%s", err, out)
	}
	if st, err := os.Lstat(filepath.Join(mnt, "dev/console")); err != nil || st.Mode()&fs.ModeCharDevice == 0 {
		t.Errorf("/dev/console in the image: %v %v", st, err)
	}
}
