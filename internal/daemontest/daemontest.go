// Package daemontest starts the real workspace daemon for tests outside its own package (and
// inside it): it builds the daemon and the in-sandbox client as mkimage does, starts the daemon
// with a cgroup parent and session sockets of the test's own, and waits for its listeners.
package daemontest

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/allox-os/allox/internal/rpc"
)

const (
	daemonPkg = "github.com/allox-os/allox/services/workspace-daemon"
	clientPkg = "github.com/allox-os/allox/services/allox"
)

// Build compiles the daemon with the build tags (a plugin's, e.g. allox_session_network; "" for
// none) into a directory of its own, which the caller removes.
func Build(tags string) (string, error) {
	dir, err := os.MkdirTemp("", "allox-workspace-daemon-test")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "allox-workspace-daemon")
	out, err := exec.Command("go", "build", "-tags", tags, "-ldflags", "-X main.version=v9.9.9-test", "-o", bin, daemonPkg).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build -tags %q %s: %w\n%s", tags, daemonPkg, err, out)
	}
	return bin, nil
}

// BuildClient compiles the allox client static, as mkimage builds it, with its python shims
// (every .py beside its source, which the daemon binds as daemon.Shims) beside it (the daemon's
// --client), into a directory of its own, which the caller removes.
func BuildClient() (string, error) {
	dir, err := os.MkdirTemp("", "allox-client-test")
	if err != nil {
		return "", err
	}
	// bwrap, as the run uid, binds the client from here.
	if err := os.Chmod(dir, 0o755); err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "allox")
	cmd := exec.Command("go", "build", "-trimpath", "-o", bin, clientPkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", clientPkg, err, out)
	}
	src, err := exec.Command("go", "list", "-f", "{{.Dir}}", clientPkg).Output()
	if err != nil {
		return "", fmt.Errorf("go list %s: %w", clientPkg, err)
	}
	shims, err := filepath.Glob(filepath.Join(strings.TrimSpace(string(src)), "*.py"))
	if err != nil || len(shims) == 0 {
		return "", fmt.Errorf("the client's python shims in %s: %v", src, err)
	}
	for _, shim := range shims {
		data, err := os.ReadFile(shim)
		if err != nil {
			return "", err
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(shim)), data, 0o644); err != nil {
			return "", err
		}
	}
	return bin, nil
}

// CgroupParent is a cgroup parent of the test's own (the same across its daemon's restarts):
// daemons of tests run at the same time (go test runs packages in parallel) must not share one,
// since a daemon removes the groups of sessions its store does not have. It is removed when the
// test ends.
func CgroupParent(tb testing.TB, suffix ...string) string {
	sum := sha256.Sum256([]byte(strings.Join(append([]string{tb.Name()}, suffix...), "/")))
	name := "allox-test-" + hex.EncodeToString(sum[:6])
	tb.Cleanup(func() { RemoveCgroupTree(tb, name) })
	return name
}

// RemoveCgroupTree removes an empty cgroup tree below the cgroup2 mount, deepest first.
func RemoveCgroupTree(tb testing.TB, name string) {
	for _, mount := range []string{"/sys/fs/cgroup/unified", "/sys/fs/cgroup"} {
		var dirs []string
		_ = filepath.WalkDir(filepath.Join(mount, name), func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			if err := os.Remove(dirs[i]); err != nil && !errors.Is(err, os.ErrNotExist) {
				tb.Logf("cgroup %s left: %v", dirs[i], err)
			}
		}
	}
}

// SocketsDir is a short directory for a daemon's --session-sockets (AF_UNIX paths are short),
// removed when the test ends.
func SocketsDir(tb testing.TB) string {
	tb.Helper()
	dir, err := os.MkdirTemp("", "ss")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o711); err != nil { // bwrap, as the run uid, traverses it
		tb.Fatal(err)
	}
	return filepath.Join(dir, "s")
}

var listening = regexp.MustCompile(`msg=listening .*listener=(\w+) addr=(\S+)`)

// Listening parses the daemon's log line announcing a listener: its name and address.
func Listening(line string) (name, addr string, ok bool) {
	m := listening.FindStringSubmatch(line)
	if m == nil {
		return "", "", false
	}
	return m[1], m[2], true
}

// Start runs the daemon bin with args (and a --cgroup-parent of the test's own unless args name
// one) and waits until it reports want listeners, by name (loopback, host, ...) with their
// addresses; its stderr goes to tb.Logf. wait reaps it; it is killed when the test ends.
func Start(tb testing.TB, bin string, want int, args ...string) (*exec.Cmd, func() error, map[string]string) {
	tb.Helper()
	if !slices.Contains(args, "--cgroup-parent") {
		args = append(args, "--cgroup-parent", CgroupParent(tb))
	}
	cmd := exec.Command(bin, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Logf("started: %s %s", bin, strings.Join(args, " "))
	addrs := make(chan [2]string, 8)
	logged := make(chan struct{})
	go func() {
		defer close(logged)
		defer close(addrs)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			tb.Log("daemon: " + sc.Text())
			if name, addr, ok := Listening(sc.Text()); ok {
				select {
				case addrs <- [2]string{name, addr}:
				default:
				}
			}
		}
	}()
	// wait reads stderr to its end before reaping (as exec.Cmd requires), so nothing logs after
	// the test ends.
	wait := sync.OnceValue(func() error { <-logged; return cmd.Wait() })
	tb.Cleanup(func() { cmd.Process.Kill(); wait() })
	got := map[string]string{}
	timeout := time.After(30 * time.Second)
	for len(got) < want {
		select {
		case a, ok := <-addrs:
			if !ok {
				tb.Fatalf("the daemon exited before listening (have %v)", got)
			}
			got[a[0]] = a[1]
		case <-timeout:
			tb.Fatalf("the daemon did not report %d listeners in 30s (have %v)", want, got)
		}
	}
	return cmd, wait, got
}

// LiveRuns counts the running runs of agent's session through c (process.list).
func LiveRuns(tb testing.TB, c *rpc.Client, agent, session string) int {
	tb.Helper()
	var list struct{ Runs []rpc.Run }
	if err := c.Call(context.Background(), rpc.ActionProcessList, map[string]any{"agent_id": agent, "session_id": session}, &list); err != nil {
		tb.Fatal(err)
	}
	n := 0
	for _, r := range list.Runs {
		if r.State == "running" {
			n++
		}
	}
	return n
}
