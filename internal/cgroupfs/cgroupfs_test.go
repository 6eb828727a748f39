package cgroupfs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The kernel's interface files are stood in for by plain files here: the tests check what is read
// and written; the real hierarchy is exercised by internal/cgroup's tests and init's
// TestRealControllers, which go through these functions.

func TestControllers(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, controllersFile), []byte("cpuset cpu io memory pids\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := Controllers(dir)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{"cpuset", "cpu", "io", "memory", "pids"}, got); d != "" {
		t.Error(d)
	}
}

func TestControllersNamesTheGroup(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "absent")
	_, err := Controllers(dir)
	if err == nil || !strings.Contains(err.Error(), dir) {
		t.Fatalf("Controllers(%s) = %v, want an error naming the group", dir, err)
	}
}

func TestEnableForChildrenWritesOnce(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, subtreeControlFile)
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := EnableForChildren(dir, "cpu", "memory"); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	if string(b) != "+cpu +memory" {
		t.Errorf("wrote %q, want %q", b, "+cpu +memory")
	}
}

func TestEnableForChildrenNothing(t *testing.T) {
	// No controllers: no write, not even an open (a group without the file is fine).
	if err := EnableForChildren(filepath.Join(t.TempDir(), "absent")); err != nil {
		t.Fatal(err)
	}
}

func TestEnableForChildrenNamesTheFile(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, subtreeControlFile), 0o755); err != nil {
		t.Fatal(err) // a directory: the open for writing fails
	}
	err := EnableForChildren(dir, "pids")
	if err == nil || !strings.Contains(err.Error(), "pids") || !strings.Contains(err.Error(), subtreeControlFile) {
		t.Fatalf("EnableForChildren = %v, want an error naming the controller and the file", err)
	}
}
