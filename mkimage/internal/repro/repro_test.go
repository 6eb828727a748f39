package repro

import (
	"bytes"
	"context"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/allox-os/allox/initramfs"
	"github.com/allox-os/allox/internal/artifact"
	"github.com/allox-os/allox/rootfs"
	"github.com/allox-os/allox/rootfs/dax"
)

var epoch = time.Unix(1700000000, 0)

// tree is a small userland; edit changes it before it is written.
func tree(t *testing.T, edit func(tr *initramfs.Tree)) *initramfs.Tree {
	t.Helper()
	tr := &initramfs.Tree{}
	must(t, tr.AddFile("/etc/hostname", 0o644, []byte("allox\n")))
	must(t, tr.AddFile("/etc/os-release", 0o644, []byte("ID=debian\n")))
	must(t, tr.AddFile("/usr/bin/prog", 0o755, bytes.Repeat([]byte("program text "), 8192)))
	must(t, tr.AddSymlink("/bin", "usr/bin"))
	if edit != nil {
		edit(tr)
	}
	return tr
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func writeCpio(t *testing.T, tr *initramfs.Tree) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "initramfs.cpio.gz")
	f, err := os.Create(p)
	must(t, err)
	must(t, initramfs.WriteGzip(f, tr, epoch))
	must(t, f.Close())
	return p
}

func writeDisk(t *testing.T, tr *initramfs.Tree) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "rootfs.img")
	opt := rootfs.DiskOptions{SizeMiB: 20, Label: "test", UUID: "0d7d5a1e-7c1e-4b1e-8a1e-0123456789ab",
		HashSeed: "1d7d5a1e-7c1e-4b1e-8a1e-0123456789ab", Mtime: epoch}
	_, err := rootfs.WriteDisk(context.Background(), p, tr, opt)
	must(t, err)
	return p
}

func files(t *testing.T, a, b string) string {
	t.Helper()
	d, err := Files(a, b)
	must(t, err)
	return d
}

func TestCpioNamesEntry(t *testing.T) {
	base := writeCpio(t, tree(t, nil))
	if d := files(t, base, writeCpio(t, tree(t, nil))); d != "" {
		t.Fatalf("two writes of the same tree differ: %s", d)
	}
	for _, tc := range []struct {
		name string
		edit func(tr *initramfs.Tree)
		want string
	}{
		{"one byte of data", func(tr *initramfs.Tree) {
			data := bytes.Repeat([]byte("program text "), 8192)
			data[5000] = 'X'
			must(t, tr.Set(initramfs.Entry{Path: "/usr/bin/prog", Mode: 0o755, Data: data}))
		}, "cpio entry usr/bin/prog: data differs at byte 5000"},
		{"mode", func(tr *initramfs.Tree) {
			must(t, tr.Set(initramfs.Entry{Path: "/etc/hostname", Mode: 0o600, Data: []byte("allox\n")}))
		}, "cpio entry etc/hostname: header differs: mode"},
		{"owner", func(tr *initramfs.Tree) {
			must(t, tr.Set(initramfs.Entry{Path: "/etc/os-release", Mode: 0o644, UID: 1000, Data: []byte("ID=debian\n")}))
		}, "cpio entry etc/os-release: header differs: uid 0 vs 1000"},
		{"symlink target", func(tr *initramfs.Tree) {
			must(t, tr.Set(initramfs.Entry{Path: "/bin", Mode: os.ModeSymlink | 0o777, Link: "usr/sbin"}))
		}, "cpio entry bin: header differs: link target usr/bin vs usr/sbin"},
		{"added entry", func(tr *initramfs.Tree) {
			must(t, tr.AddFile("/etc/added", 0o644, nil))
		}, "cpio entry #4 is etc/hostname in the first archive and etc/added in the second"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if d := files(t, base, writeCpio(t, tree(t, tc.edit))); !strings.Contains(d, tc.want) {
				t.Errorf("detail %q, want it to contain %q", d, tc.want)
			}
		})
	}
}

func TestDiskNamesExt4File(t *testing.T) {
	base := writeDisk(t, tree(t, nil))
	if d := files(t, base, writeDisk(t, tree(t, nil))); d != "" {
		t.Fatalf("two writes of the same tree differ: %s", d)
	}
	other := writeDisk(t, tree(t, func(tr *initramfs.Tree) {
		data := bytes.Repeat([]byte("program text "), 8192)
		data[70000] = 'X'
		must(t, tr.Set(initramfs.Entry{Path: "/usr/bin/prog", Mode: 0o755, Data: data}))
	}))
	d := files(t, base, other)
	t.Logf("changed file: %s", d)
	for _, want := range []string{"in partition 1 (starts at byte 1048576)", "of file /usr/bin/prog (inode "} {
		if !strings.Contains(d, want) {
			t.Errorf("detail %q lacks %q", d, want)
		}
	}
	// The byte offset is exact: block 17 of the file holds byte 70000 (4 KiB blocks).
	off := offsetOf(t, d)
	data := readAt(t, other, off)
	if data != 'X' {
		t.Errorf("the named offset %d holds %q, not the changed byte", off, data)
	}
}

func TestDiskMBRAndMetadata(t *testing.T) {
	base := writeDisk(t, tree(t, nil))
	other := copyFile(t, base)
	flip(t, other, 446+8) // partition 1's start LBA
	if d := files(t, base, other); !strings.Contains(d, "offset 454 (0x1c6), in the MBR") {
		t.Errorf("MBR change: %q", d)
	}
	other = copyFile(t, base)
	flip(t, other, 1<<20+1024+120) // the superblock's volume label
	if d := files(t, base, other); !strings.Contains(d, "ext4 block 0, the superblock") {
		t.Errorf("superblock change: %q", d)
	}
}

func TestELFNamesSection(t *testing.T) {
	exe, err := os.Executable() // this test binary: a real ELF file
	must(t, err)
	f, err := elf.Open(exe)
	must(t, err)
	text := f.Section(".rodata")
	f.Close()
	a, b := copyFile(t, exe), copyFile(t, exe)
	flip(t, b, int64(text.Offset)+100)
	if d := files(t, a, b); !strings.Contains(d, "in ELF section .rodata (+0x64)") {
		t.Errorf("detail %q does not name .rodata", d)
	}
}

func TestJSONNamesLine(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.json"), filepath.Join(dir, "b.json")
	must(t, os.WriteFile(a, []byte("{\n  \"name\": \"allox\",\n  \"version\": \"1\"\n}\n"), 0o644))
	must(t, os.WriteFile(b, []byte("{\n  \"name\": \"allox\",\n  \"version\": \"2\"\n}\n"), 0o644))
	if d := files(t, a, b); d != `line 3: "  \"version\": \"1\"" vs "  \"version\": \"2\""` {
		t.Errorf("detail %q", d)
	}
}

func TestOffsetFallback(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	must(t, os.WriteFile(a, []byte{0, 1, 2, 3, 4}, 0o644))
	must(t, os.WriteFile(b, []byte{0, 1, 2, 9, 4, 5}, 0o644))
	if d := files(t, a, b); d != "first differing byte at offset 3 (0x3) (sizes 5 and 6 bytes)" {
		t.Errorf("detail %q", d)
	}
}

func TestDirs(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	for _, d := range []string{a, b} {
		must(t, os.MkdirAll(filepath.Join(d, "kata", "config.d"), 0o755))
		must(t, os.WriteFile(filepath.Join(d, "boot.json"), []byte("{}\n"), 0o644))
	}
	must(t, os.WriteFile(filepath.Join(a, "kata", "config.d", "50-allox.toml"), []byte("a = 1\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(b, "kata", "config.d", "50-allox.toml"), []byte("a = 2\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(b, "extra"), nil, 0o644))
	diffs, err := Dirs(a, b)
	must(t, err)
	want := []string{"extra: only in " + b, `kata/config.d/50-allox.toml: line 1: "a = 1" vs "a = 2"`}
	if len(diffs) != len(want) {
		t.Fatalf("diffs %v, want %v", diffs, want)
	}
	for i, d := range diffs {
		if d.String() != want[i] {
			t.Errorf("diff %d = %q, want %q", i, d, want[i])
		}
	}
}

func copyFile(t *testing.T, src string) string {
	t.Helper()
	data, err := os.ReadFile(src)
	must(t, err)
	p := filepath.Join(t.TempDir(), filepath.Base(src))
	must(t, os.WriteFile(p, data, 0o644))
	return p
}

func flip(t *testing.T, p string, off int64) {
	t.Helper()
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	must(t, err)
	defer f.Close()
	b := []byte{0}
	_, err = f.ReadAt(b, off)
	must(t, err)
	b[0] ^= 0xff
	_, err = f.WriteAt(b, off)
	must(t, err)
}

func readAt(t *testing.T, p string, off int64) byte {
	t.Helper()
	f, err := os.Open(p)
	must(t, err)
	defer f.Close()
	b := []byte{0}
	_, err = f.ReadAt(b, off)
	must(t, err)
	return b[0]
}

// offsetOf reads the decimal offset out of "first differing byte at offset N (0x...)".
func offsetOf(t *testing.T, detail string) int64 {
	t.Helper()
	var off int64
	i := strings.Index(detail, "offset ")
	if i < 0 {
		t.Fatalf("no offset in %q", detail)
	}
	if _, err := fmt.Sscan(detail[i+len("offset "):], &off); err != nil {
		t.Fatalf("offset in %q: %v", detail, err)
	}
	return off
}

func TestBzImageRegion(t *testing.T) {
	found, _ := filepath.Glob(filepath.Join(artifact.CacheDir(), "kernel", "builds", "*", "bzImage"))
	if len(found) == 0 {
		t.Skip("no kernel in the cache " + artifact.CacheDir() + ": run make image first")
	}
	a := copyFile(t, found[0])
	head, err := readHead(a, 4096)
	must(t, err)
	setupEnd := (int64(head[0x1f1]) + 1) * 512
	for off, want := range map[int64]string{
		0x1f1:           "in the bzImage boot sector",
		0x300:           "in the bzImage real-mode setup",
		setupEnd + 4096: "in the bzImage protected-mode kernel (compressed vmlinux) at +0x1000",
	} {
		b := copyFile(t, found[0])
		flip(t, b, off)
		if d := files(t, a, b); !strings.Contains(d, want) {
			t.Errorf("byte %d flipped: detail %q, want %q", off, d, want)
		}
	}
}

// TestDAXImage: behind Kata's NVDIMM DAX header (rootfs/dax), a changed uuid is named as such and a
// changed file is still found through MBR #1, whose partition starts 2 MiB later.
func TestDAXImage(t *testing.T) {
	wrap := func(img, seed string) string {
		must(t, dax.AddHeader(img, dax.Options{Seed: []byte(seed)}))
		return img
	}
	base := wrap(writeDisk(t, tree(t, nil)), "spec 1")
	if d := files(t, base, wrap(writeDisk(t, tree(t, nil)), "spec 2")); !strings.Contains(d, "offset 4112 (0x1010), in the NVDIMM DAX info block's uuid") {
		t.Errorf("another seed: %q", d)
	}
	other := wrap(writeDisk(t, tree(t, func(tr *initramfs.Tree) {
		must(t, tr.Set(initramfs.Entry{Path: "/usr/bin/prog", Mode: 0o755, Data: bytes.Repeat([]byte("program text!"), 8192)}))
	})), "spec 1")
	if d := files(t, base, other); !strings.Contains(d, "in partition 1 (starts at byte 3145728), ext4 block ") || !strings.Contains(d, "of file /usr/bin/prog") {
		t.Errorf("a changed file behind the DAX header: %q", d)
	}
}

// TestELFBuildPathLeak is the kernel's case in small: the same C file compiled with debug info in two
// directories of different lengths, with only -ffile-prefix-map=DIR/= (DW_AT_comp_dir keeps DIR). The
// detail names the sections that differ, the build-id note (computed over the debug sections) among
// them, not just the ELF header field that moved.
func TestELFBuildPathLeak(t *testing.T) {
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("gcc is not installed: apt-get install gcc (ci/deps.sh)")
	}
	build := func(dir string) string {
		must(t, os.MkdirAll(dir, 0o755))
		must(t, os.WriteFile(filepath.Join(dir, "m.c"), []byte("int main(void) { return 0; }\n"), 0o644))
		cmd := exec.Command("gcc", "-g", "-O2", "-Wl,--build-id=sha1", "-ffile-prefix-map="+dir+"/=", "m.c", "-o", "m")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("gcc: %v\n%s", err, out)
		}
		return filepath.Join(dir, "m")
	}
	root := t.TempDir()
	d := files(t, build(filepath.Join(root, "a")), build(filepath.Join(root, "bb", "longer")))
	for _, want := range []string{"differing sections: ", ".note.gnu.build-id", ".debug_line_str"} {
		if !strings.Contains(d, want) {
			t.Errorf("detail %q lacks %q", d, want)
		}
	}
	t.Log(d)
}
