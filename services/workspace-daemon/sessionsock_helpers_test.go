package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/allox-os/allox/services/internal/daemon"
)

// builtClient is the allox client, built static as mkimage builds it, with its python shims
// beside it (the daemon's --client).
var builtClient = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "allox-client-test")
	if err != nil {
		return "", err
	}
	// bwrap, as the run uid, binds the client from here.
	if err := os.Chmod(dir, 0o755); err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "allox")
	cmd := exec.Command("go", "build", "-trimpath", "-o", bin, "../allox")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ../allox: %w\n%s", err, out)
	}
	for _, name := range daemon.Shims {
		data, err := os.ReadFile(filepath.Join("../allox", name))
		if err != nil {
			return "", err
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return "", err
		}
	}
	return bin, nil
})

func client(t testing.TB) string {
	t.Helper()
	bin, err := builtClient()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// socketsDir is a short directory for a daemon's --session-sockets (AF_UNIX paths are short),
// removed when the test ends.
func socketsDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "ss")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o711); err != nil { // bwrap, as the run uid, traverses it
		t.Fatal(err)
	}
	return filepath.Join(dir, "s")
}

// withSessionSockets gives a daemon started by a test its own --session-sockets and the built
// --client, unless the test names them: the defaults are the guest's, shared by every daemon on
// this machine.
func withSessionSockets(t testing.TB, args []string) []string {
	t.Helper()
	if !slices.Contains(args, "--session-sockets") {
		args = append(args, "--session-sockets", socketsDir(t))
	}
	if !slices.Contains(args, "--client") {
		args = append(args, "--client", client(t))
	}
	return args
}
