package boot

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestRealControllers mounts the cgroup2 hierarchy, makes an empty child cgroup and enables in
// it every controller the child has available.
func TestRealControllers(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount cgroup2; run: sudo go test ./init/internal/boot -run Real")
	}
	root := t.TempDir()
	if err := unix.Mount("cgroup2", root, "cgroup2", 0, ""); err != nil {
		t.Fatalf("mount cgroup2: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(root, unix.MNT_DETACH) })
	child := fmt.Sprintf("allox-init-test-%d", os.Getpid())
	if err := os.Mkdir(filepath.Join(root, child), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(filepath.Join(root, child)) })
	sys := &Sys{Root: root}
	if err := (Controllers{"/" + child}).Run(context.Background(), sys); err != nil {
		t.Fatal(err)
	}
	avail, _ := os.ReadFile(filepath.Join(root, child, "cgroup.controllers"))
	got, _ := os.ReadFile(filepath.Join(root, child, "cgroup.subtree_control"))
	if strings.Join(strings.Fields(string(avail)), " ") != strings.Join(strings.Fields(string(got)), " ") {
		t.Errorf("subtree_control = %q, want every available controller %q", got, avail)
	}
	t.Logf("controllers enabled: %q", strings.TrimSpace(string(got)))
}
