package initramfs

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestAddRejects(t *testing.T) {
	src := filepath.Join(t.TempDir(), "src")
	if err := os.WriteFile(src, []byte("four"), 0o644); err != nil {
		t.Fatal(err)
	}
	base := func() *Tree {
		tr := &Tree{}
		must(t, tr.AddSymlink("/bin", "usr/bin"))
		must(t, tr.AddFile("/etc/hostname", 0o644, []byte("x\n")))
		must(t, tr.AddFile("/usr/lib/libc.so", 0o644, nil))
		return tr
	}
	for _, tc := range []struct {
		name string
		e    Entry
		want string // substring of the error
	}{
		{"relative", Entry{Path: "etc/passwd"}, `use "/etc/passwd"`},
		{"dotdot", Entry{Path: "/usr/../etc"}, `contains ".."`},
		{"unclean", Entry{Path: "/usr//bin"}, `use "/usr/bin"`},
		{"trailing slash", Entry{Path: "/usr/"}, `use "/usr"`},
		{"nul", Entry{Path: "/a\x00b"}, "NUL"},
		{"empty", Entry{}, "empty"},
		{"long element", Entry{Path: "/" + strings.Repeat("x", 256)}, "limit is 255"},
		{"exists", Entry{Path: "/etc/hostname", Data: []byte{}}, "already in the tree as a file"},
		{"through symlink", Entry{Path: "/bin/sh", Mode: fs.ModeSymlink | 0o777, Link: "busybox"}, "add /usr/bin/sh instead"},
		{"under file", Entry{Path: "/etc/hostname/x", Data: []byte{}}, "parent /etc/hostname is a file"},
		{"dir with children to file", Entry{Path: "/usr/lib", Data: []byte{}}, "entries beneath it"},
		{"root not dir", Entry{Path: "/", Data: []byte{}}, "must be a directory"},
		{"socket", Entry{Path: "/s", Mode: fs.ModeSocket}, "unsupported bits"},
		{"symlink without target", Entry{Path: "/l", Mode: fs.ModeSymlink}, "symlink target"},
		{"dir with data", Entry{Path: "/d", Mode: fs.ModeDir, Data: []byte("x")}, "has no contents"},
		{"file with link", Entry{Path: "/f", Link: "x"}, "has no link target"},
		{"file with device", Entry{Path: "/f", Major: 1}, "no device number"},
		{"source and data", Entry{Path: "/f", Source: src, Data: []byte("x")}, "not both"},
		{"size mismatch", Entry{Path: "/f", Source: src, Size: 3}, "does not match source"},
		{"data size mismatch", Entry{Path: "/f", Data: []byte("ab"), Size: 3}, "does not match the 2 bytes"},
		{"missing source", Entry{Path: "/f", Source: src + ".missing"}, "no such file"},
		{"negative uid", Entry{Path: "/f", UID: -1}, "out of range"},
		{"char without device", Entry{Path: "/c", Mode: fs.ModeCharDevice}, "needs fs.ModeDevice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := base().Add(tc.e)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Add(%+v) = %v, want an error containing %q", tc.e, err, tc.want)
			}
		})
	}
}

func TestAddExistsIsSentinel(t *testing.T) {
	tr := &Tree{}
	must(t, tr.AddDir("/etc", 0o755))
	if err := tr.AddDir("/etc", 0o700); !errors.Is(err, ErrExists) {
		t.Fatalf("second AddDir = %v, want ErrExists", err)
	}
}

func TestEntriesImpliesParents(t *testing.T) {
	tr := &Tree{}
	must(t, tr.Add(Entry{Path: "/var/lib/x/file", Mode: 0o600, UID: 7, GID: 8, Data: []byte("abc")}))
	must(t, tr.AddDir("/var", 0o700))
	got := tr.Entries()
	want := []Entry{
		{Path: "/", Mode: fs.ModeDir | 0o755},
		{Path: "/var", Mode: fs.ModeDir | 0o700},
		{Path: "/var/lib", Mode: fs.ModeDir | 0o755},
		{Path: "/var/lib/x", Mode: fs.ModeDir | 0o755},
		{Path: "/var/lib/x/file", Mode: 0o600, UID: 7, GID: 8, Size: 3, Data: []byte("abc")},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("Entries (-want +got):\n%s", d)
	}
	if e, ok := tr.Lookup("/var/lib"); !ok || !e.IsDir() {
		t.Errorf("Lookup(/var/lib) = %+v, %v; want an implied directory", e, ok)
	}
	if _, ok := tr.Lookup("/nope"); ok {
		t.Error("Lookup(/nope) found something")
	}
}

func TestOverlayAndSet(t *testing.T) {
	base := &Tree{}
	must(t, base.AddDir("/root", 0o700))
	must(t, base.AddFile("/etc/resolv.conf", 0o644, []byte("nameserver 1.1.1.1\n")))
	must(t, base.AddFile("/etc/hostname", 0o644, []byte("old\n")))

	top := &Tree{}
	must(t, top.AddFile("/etc/resolv.conf", 0o644, nil))
	must(t, top.AddFile("/root/.profile", 0o600, []byte("x")))
	must(t, base.Overlay(top))

	root, _ := base.Lookup("/root")
	if root.Mode != fs.ModeDir|0o700 {
		t.Errorf("/root mode after overlay = %v, want drwx------ (implied dirs of the overlay must not win)", root.Mode)
	}
	if rc, _ := base.Lookup("/etc/resolv.conf"); rc.Size != 0 {
		t.Errorf("/etc/resolv.conf size = %d, want 0", rc.Size)
	}
	if err := base.Set(Entry{Path: "/root", Data: []byte{}}); err == nil {
		t.Error("Set replaced a directory with children by a file")
	}
	must(t, base.Set(Entry{Path: "/etc/hostname", Mode: fs.ModeSymlink | 0o777, Link: "/run/hostname"}))
	if h, _ := base.Lookup("/etc/hostname"); h.Link != "/run/hostname" {
		t.Errorf("Set did not replace /etc/hostname: %+v", h)
	}
	if base.Len() != 4 {
		t.Errorf("Len = %d, want 4", base.Len())
	}
}

func TestResolve(t *testing.T) {
	tr := &Tree{}
	must(t, tr.AddSymlink("/bin", "usr/bin"))
	must(t, tr.AddSymlink("/sbin", "/usr/sbin"))
	must(t, tr.AddSymlink("/usr/sbin", "bin"))
	must(t, tr.AddSymlink("/loop", "loop"))
	for in, want := range map[string]string{
		"/bin/sh":     "/usr/bin/sh",
		"/sbin/init":  "/usr/bin/init",
		"/bin":        "/bin",
		"/etc/passwd": "/etc/passwd",
	} {
		if got, err := tr.Resolve(in); err != nil || got != want {
			t.Errorf("Resolve(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := tr.Resolve("/loop/x"); err == nil || !strings.Contains(err.Error(), "too many levels") {
		t.Errorf("Resolve(/loop/x) = %v, want a loop error", err)
	}
}

func TestFromDir(t *testing.T) {
	dir := t.TempDir()
	write := func(rel, data string, mode fs.FileMode) {
		must(t, os.MkdirAll(filepath.Join(dir, filepath.Dir(rel)), 0o755))
		must(t, os.WriteFile(filepath.Join(dir, rel), []byte(data), mode))
		must(t, os.Chmod(filepath.Join(dir, rel), mode))
	}
	write("usr/bin/prog", "#!/bin/sh\n", 0o755)
	write("etc/shadow", "", 0o640)
	must(t, os.Symlink("usr/bin", filepath.Join(dir, "bin")))
	must(t, os.Link(filepath.Join(dir, "usr/bin/prog"), filepath.Join(dir, "usr/bin/hard")))
	must(t, syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o600))
	must(t, os.Chmod(dir, 0o755))
	devices := os.Geteuid() == 0
	if devices {
		must(t, syscall.Mknod(filepath.Join(dir, "console"), syscall.S_IFCHR|0o600, 5<<8|1))
		must(t, os.Lchown(filepath.Join(dir, "etc/shadow"), 0, 42))
	}
	tr, err := FromDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	uid, gid := os.Geteuid(), os.Getegid()
	want := []Entry{
		{Path: "/", Mode: fs.ModeDir | 0o755, UID: uid, GID: gid},
		{Path: "/bin", Mode: fs.ModeSymlink | 0o777, UID: uid, GID: gid, Link: "usr/bin"},
		{Path: "/etc", Mode: fs.ModeDir | 0o755, UID: uid, GID: gid},
		{Path: "/etc/shadow", Mode: 0o640, UID: uid, GID: gid, Source: filepath.Join(dir, "etc/shadow")},
		{Path: "/fifo", Mode: fs.ModeNamedPipe | 0o600, UID: uid, GID: gid},
		{Path: "/usr", Mode: fs.ModeDir | 0o755, UID: uid, GID: gid},
		{Path: "/usr/bin", Mode: fs.ModeDir | 0o755, UID: uid, GID: gid},
		{Path: "/usr/bin/hard", Mode: 0o755, UID: uid, GID: gid, Size: 10, Source: filepath.Join(dir, "usr/bin/hard")},
		{Path: "/usr/bin/prog", Mode: 0o755, UID: uid, GID: gid, Size: 10, Source: filepath.Join(dir, "usr/bin/prog")},
	}
	if devices {
		want[3].GID = 42
		want = append(want[:2], append([]Entry{{Path: "/console", Mode: fs.ModeDevice | fs.ModeCharDevice | 0o600, Major: 5, Minor: 1}}, want[2:]...)...)
	}
	if d := cmp.Diff(want, tr.Entries()); d != "" {
		t.Errorf("FromDir (-want +got):\n%s", d)
	}
}

func TestDevNumbers(t *testing.T) {
	makedev := func(major, minor uint64) uint64 { // glibc's gnu_dev_makedev
		return (major&0xfff)<<8 | (major&^0xfff)<<32 | minor&0xff | (minor&^0xff)<<12
	}
	for _, tc := range []struct{ major, minor uint32 }{{5, 1}, {8, 3}, {0xfff, 0xfffff}, {0xfffff000, 0xff}, {259, 1 << 19}} {
		dev := makedev(uint64(tc.major), uint64(tc.minor))
		if ma, mi := devMajor(dev), devMinor(dev); ma != tc.major || mi != tc.minor {
			t.Errorf("dev %#x = %d:%d, want %d:%d", dev, ma, mi, tc.major, tc.minor)
		}
	}
	if ma, mi := devMajor(0x0501), devMinor(0x0501); ma != 5 || mi != 1 {
		t.Errorf("dev 0x0501 = %d:%d, want 5:1 (/dev/console)", ma, mi)
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// A clone changes on its own: what is set in it is not in the original, and the other way round.
func TestCloneIsIndependent(t *testing.T) {
	orig := &Tree{}
	if err := orig.AddFile("/a/f", 0o644, []byte("f")); err != nil {
		t.Fatal(err)
	}
	clone := orig.Clone()
	if err := clone.AddFile("/init", 0o755, []byte("i")); err != nil {
		t.Fatal(err)
	}
	if err := orig.AddFile("/a/g", 0o644, []byte("g")); err != nil {
		t.Fatal(err)
	}
	if _, ok := orig.Lookup("/init"); ok {
		t.Error("an entry set in the clone is in the original")
	}
	if _, ok := clone.Lookup("/a/g"); ok {
		t.Error("an entry added to the original is in the clone")
	}
	if err := clone.AddFile("/a", 0o644, nil); err == nil {
		t.Error("the clone lost the count of entries beneath /a: a file replaced a non-empty directory")
	}
	if orig.Len() != 2 || clone.Len() != 2 {
		t.Errorf("Len: original %d, clone %d; want 2 and 2", orig.Len(), clone.Len())
	}
}
