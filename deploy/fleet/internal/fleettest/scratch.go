package fleettest

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/BurntSushi/toml"
	securejoin "github.com/cyphar/filepath-securejoin"
	"golang.org/x/sys/unix"

	"github.com/allox-os/allox/internal/testenv"
)

// ScratchRoot is a temporary host root: the machine's /usr (and /bin, /sbin, /lib, /lib64, as
// directories or the symlinks they are here) bind-mounted read-only so install.sh runs with a real
// shell and coreutils through chroot, /dev/null, Kata's shipped configurations as a Kata install
// leaves them, and containerd's config.toml. /etc/alternatives is bound too: Debian's awk is a
// link through it. Needs root (mount, chroot).
func ScratchRoot(t testing.TB, containerdConfig string) string {
	t.Helper()
	testenv.Root(t, "to bind-mount /usr into a scratch root and chroot into it", "./deploy/fleet/...")
	root := t.TempDir()
	for _, d := range []string{"/usr", "/bin", "/sbin", "/lib", "/lib64"} {
		st, err := os.Lstat(d)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue
		case err != nil:
			t.Fatal(err)
		case st.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(d)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target, filepath.Join(root, d)); err != nil {
				t.Fatal(err)
			}
		default:
			bindReadOnly(t, d, filepath.Join(root, d), true)
		}
	}
	for _, d := range []string{"dev", "etc"} {
		if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat("/etc/alternatives"); err == nil { // Debian's awk is a link through it
		bindReadOnly(t, "/etc/alternatives", filepath.Join(root, "etc/alternatives"), true)
	}
	bindReadOnly(t, "/dev/null", filepath.Join(root, "dev/null"), false)
	for name, data := range map[string]string{
		"opt/kata/share/defaults/kata-containers/configuration-qemu.toml":                       "# Kata's shipped Go-runtime configuration\n[hypervisor.qemu]\npath = \"/opt/kata/bin/qemu-system-x86_64\"\n",
		"opt/kata/share/defaults/kata-containers/runtime-rs/configuration-qemu-runtime-rs.toml": "# Kata's shipped runtime-rs configuration\n[hypervisor.qemu]\npath = \"/opt/kata/bin/qemu-system-x86_64\"\n",
		"etc/containerd/config.toml":  containerdConfig,
		"etc/hostname":                "node-1\n",
		"var/lib/kubelet/config.yaml": "kind: KubeletConfiguration\n",
	} {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// bindReadOnly bind-mounts src onto dst read-only and unmounts it when the test ends, before the
// temporary directory is removed (read-only, so a failed unmount cannot let the removal reach src).
func bindReadOnly(t testing.TB, src, dst string, dir bool) {
	t.Helper()
	var err error
	if dir {
		err = os.Mkdir(dst, 0o755)
	} else {
		err = os.WriteFile(dst, nil, 0o644)
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(src, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		t.Fatalf("bind-mount %s: %v", src, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dst, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dst, err)
		}
	})
	if err := unix.Mount("", dst, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY, ""); err != nil {
		t.Fatalf("remount %s read-only: %v", dst, err)
	}
}

var bindMounts = map[string]bool{"usr": true, "bin": true, "sbin": true, "lib": true, "lib64": true, "dev/null": true, "etc/alternatives": true}

// Listing describes every entry below root (not descending into the bind mounts): its mode, and a
// regular file's sha256 or a symlink's target. Two equal listings are the same tree.
func Listing(t testing.TB, root string) map[string]string {
	t.Helper()
	l := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		r, _ := filepath.Rel(root, p)
		st, err := os.Lstat(p)
		if err != nil {
			return err
		}
		desc := st.Mode().String()
		switch {
		case bindMounts[r]:
			if d.IsDir() {
				l[r] = desc + " (bind mount)"
				return filepath.SkipDir
			}
		case st.Mode().IsRegular():
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			s := sha256.Sum256(data)
			desc += " " + hex.EncodeToString(s[:])
		case st.Mode()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			desc += " -> " + target
		}
		l[r] = desc
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// ReadFile returns p's contents or fails the test.
func ReadFile(t testing.TB, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// DiffListing says how after departs from before, one line per entry; "" when they are the same.
func DiffListing(before, after map[string]string) string {
	var s string
	for k, v := range before {
		if after[k] != v {
			s += fmt.Sprintf("  %s: was %q, now %q\n", k, v, after[k])
		}
	}
	for k, v := range after {
		if _, ok := before[k]; !ok {
			s += fmt.Sprintf("  %s: left behind (%s)\n", k, v)
		}
	}
	return s
}

// CheckInstalled fails the test unless both installed drop-ins in the Kata configuration
// directory configDir (below root) name a kernel and an image or initrd that exist below root
// with the bytes of the payload's file of the same name.
func CheckInstalled(t testing.TB, root, configDir, payload string) {
	t.Helper()
	for _, dropIn := range []string{"config.d/50-allox.toml", "runtime-rs/config.d/50-allox.toml"} {
		var d struct {
			Hypervisor struct {
				QEMU struct{ Kernel, Image, Initrd string } `toml:"qemu"`
			} `toml:"hypervisor"`
		}
		p := filepath.Join(root, configDir, dropIn)
		if _, err := toml.DecodeFile(p, &d); err != nil {
			t.Errorf("installed drop-in: %v", err)
			continue
		}
		q := d.Hypervisor.QEMU
		for _, asset := range []string{q.Kernel, q.Image, q.Initrd} {
			if asset == "" {
				continue
			}
			onHost, err := securejoin.SecureJoin(root, asset) // as the host resolves it
			if err != nil {
				t.Fatal(err)
			}
			if ReadFile(t, onHost) != ReadFile(t, filepath.Join(payload, filepath.Base(asset))) {
				t.Errorf("%s names %s, which is not the payload's %s", dropIn, asset, filepath.Base(asset))
			}
		}
		if q.Kernel == "" || q.Image == "" && q.Initrd == "" {
			t.Errorf("%s names no kernel, image or initrd: %+v", dropIn, q)
		}
	}
}
