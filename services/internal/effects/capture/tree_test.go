package capture

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/allox-os/allox/services/internal/effects/evidence"
)

// TestTreeDescribesEveryKind walks a tree with every kind of entry, nested a few levels deep
// (so that several walkers share it), and checks each canonical value.
func TestTreeDescribesEveryKind(t *testing.T) {
	root := t.TempDir()
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{".": "dir mode=0755 uid=0 gid=0"}
	mkdir := func(rel string, mode os.FileMode) {
		if err := os.Mkdir(filepath.Join(root, rel), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(filepath.Join(root, rel), mode); err != nil {
			t.Fatal(err)
		}
	}
	mkdir("a", 0o700)
	mkdir("a/b", 0o755)
	mkdir("a/b/c", 0o1777|os.ModeSticky)
	for i := range 40 {
		mkdir(fmt.Sprintf("a/b/c/d%02d", i), 0o755)
		want[fmt.Sprintf("a/b/c/d%02d", i)] = "dir mode=0755 uid=0 gid=0"
	}
	want["a"], want["a/b"], want["a/b/c"] = "dir mode=0700 uid=0 gid=0", "dir mode=0755 uid=0 gid=0", "dir mode=1777 uid=0 gid=0"
	if err := os.WriteFile(filepath.Join(root, "a/b/c/d07/setuid"), []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(filepath.Join(root, "a/b/c/d07/setuid"), 1000, 1001); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(root, "a/b/c/d07/setuid"), 0o755|os.ModeSetuid); err != nil {
		t.Fatal(err)
	}
	want["a/b/c/d07/setuid"] = "file mode=4755 uid=1000 gid=1001 size=6 sha256=5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03"
	if err := os.WriteFile(filepath.Join(root, "empty"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	want["empty"] = "file mode=0600 uid=0 gid=0 size=0 sha256=e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
	// A symlink to a directory is described, not followed: nothing below it is listed.
	if err := os.Symlink("a/b", filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	want["link"] = "symlink uid=0 gid=0 -> a/b"
	if err := unix.Mkfifo(filepath.Join(root, "a/fifo"), 0o640); err != nil {
		t.Fatal(err)
	}
	want["a/fifo"] = "fifo mode=0640 uid=0 gid=0"
	if err := unix.Mknod(filepath.Join(root, "a/null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
		t.Fatal(err)
	}
	want["a/null"] = "chardev mode=0666 uid=0 gid=0 rdev=1:3"
	if err := unix.Mknod(filepath.Join(root, "a/loop"), unix.S_IFBLK|0o660, int(unix.Mkdev(7, 42))); err != nil {
		t.Fatal(err)
	}
	want["a/loop"] = "blockdev mode=0660 uid=0 gid=0 rdev=7:42"
	name := "new\nline\ttab \"quoted\" \xff"
	if err := os.WriteFile(filepath.Join(root, "a", name), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	want["a/"+name] = "file mode=0644 uid=0 gid=0 size=1 sha256=2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881"
	for n, mode := range map[string]uint32{"a/fifo": 0o640, "a/null": 0o666, "a/loop": 0o660} { // past the umask
		if err := unix.Chmod(filepath.Join(root, n), mode); err != nil {
			t.Fatal(err)
		}
	}

	s := Tree(root)
	if s.Unconfirmable != "" {
		t.Fatalf("Tree: unconfirmable: %s", s.Unconfirmable)
	}
	got := map[string]string{}
	for _, it := range s.Items {
		if _, dup := got[it.Key]; dup {
			t.Errorf("key %q listed twice", it.Key)
		}
		got[it.Key] = it.Value
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%q = %q, want %q", k, got[k], v)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("unexpected entry %q = %q", k, got[k])
		}
	}
}

// TestTreeRootKinds covers a root that is missing, a file or a symlink: each is one item ".".
func TestTreeRootKinds(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(dir, filepath.Join(dir, "l")); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ root, value string }{
		{filepath.Join(dir, "missing"), absent},
		{filepath.Join(dir, "f"), "file mode=0644 uid=0 gid=0 size=1 sha256=2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881"},
		{filepath.Join(dir, "l"), "symlink uid=0 gid=0 -> " + dir},
	} {
		s := Tree(c.root)
		if want := []evidence.Item{{Key: ".", Value: c.value}}; !slices.Equal(s.Items, want) {
			t.Errorf("Tree(%s) = %+v (unconfirmable %q), want %+v", c.root, s.Items, s.Unconfirmable, want)
		}
	}
}
