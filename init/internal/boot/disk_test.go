package boot

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// image creates a sparse file of size bytes and applies edit (offset → bytes).
func image(t *testing.T, size int64, edit map[int64]string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "disk.img")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	for off, s := range edit {
		if _, err := f.WriteAt([]byte(s), off); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

func tool(t *testing.T, name string, args ...string) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		t.Skipf("%s not installed (apt-get install btrfs-progs e2fsprogs): %v", name, err)
	}
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
}

func TestClassify(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		name  string
		path  func(t *testing.T) string
		want  Content
		looks string
	}{
		{"blank", func(t *testing.T) string { return image(t, 64*mib, nil) }, Blank, ""},
		{"blank tiny", func(t *testing.T) string { return image(t, 4096, nil) }, Blank, ""},
		{"empty", func(t *testing.T) string { return image(t, 0, nil) }, Blank, ""},
		{"btrfs magic only", func(t *testing.T) string {
			return image(t, 64*mib, map[int64]string{btrfsMagicOff: btrfsMagic})
		}, Btrfs, ""},
		{"data in the last byte of the first MiB", func(t *testing.T) string {
			return image(t, 64*mib, map[int64]string{mib - 1: "x"})
		}, Other, "data of an unknown kind"},
		{"data just past the Btrfs magic", func(t *testing.T) string {
			return image(t, 64*mib, map[int64]string{btrfsMagicOff + int64(len(btrfsMagic)): "x"})
		}, Other, "data of an unknown kind"},
		{"data in the first byte of the last MiB", func(t *testing.T) string {
			return image(t, 64*mib, map[int64]string{63 * mib: "x"})
		}, Other, "data of an unknown kind"},
		{"data at the end", func(t *testing.T) string {
			return image(t, 64*mib, map[int64]string{64*mib - 10: "x"})
		}, Other, "data of an unknown kind"},
		{"mbr", func(t *testing.T) string { return image(t, 64*mib, map[int64]string{0x1fe: "\x55\xaa"}) },
			Other, "an MBR partition table"},
		{"real btrfs", func(t *testing.T) string {
			p := image(t, 128*mib, nil)
			tool(t, "mkfs.btrfs", "--mixed", "--nodiscard", p)
			return p
		}, Btrfs, ""},
		{"real ext4", func(t *testing.T) string {
			p := image(t, 64*mib, nil)
			tool(t, "mkfs.ext4", "-q", "-F", p)
			return p
		}, Other, "an ext2/3/4 filesystem"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := ProbeFile(tc.path(t))
			if err != nil {
				t.Fatal(err)
			}
			if p.Content != tc.want || p.Looks != tc.looks {
				t.Errorf("Probe = %+v, want content %d looks %q", p, tc.want, tc.looks)
			}
		})
	}
}

func TestFindDisk(t *testing.T) {
	sys := (&fake{}).sys(t)
	write(t, sys.Root, "/sys/block/vda/serial", "rootfs\n")
	write(t, sys.Root, "/sys/block/vdb/serial", "allox-ws")
	write(t, sys.Root, "/sys/block/vdc/serial", "a-very-long-serial-n") // QEMU keeps 20 bytes
	write(t, sys.Root, "/sys/block/sda/serial", "allox-ws2")
	for serial, want := range map[string]string{
		"allox-ws":                  "/dev/vdb",
		"a-very-long-serial-number": "/dev/vdc",
		"rootfs":                    "/dev/vda",
		"allox-ws2":                 "", // only virtio disks count
		"absent":                    "",
	} {
		got, err := FindDisk(sys, serial)
		if got != want || (want == "") != (err != nil) {
			t.Errorf("FindDisk(%q) = %q, %v; want %q", serial, got, err, want)
		}
	}
}
