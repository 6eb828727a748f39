package daemon_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/allox-os/allox/internal/testenv"
	"github.com/allox-os/allox/services/kuruwa/internal/cli"
	"github.com/allox-os/allox/services/kuruwa/internal/config"
	"github.com/allox-os/allox/services/kuruwa/internal/daemon"
	"github.com/allox-os/allox/services/kuruwa/internal/entry"
	"github.com/allox-os/allox/services/kuruwa/internal/wire"
)

// kuruwaBin (the CLI) and kuruwadBin (the daemons) are built once for the package: the main
// daemon runs kuruwad as the instance daemon, as it does in production.
var kuruwaBin, kuruwadBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "kwbin")
	if err != nil {
		panic(err)
	}
	kuruwaBin, kuruwadBin = filepath.Join(dir, "kuruwa"), filepath.Join(dir, "kuruwad")
	// Static, as the appliance ships them: no dynamic loader on every CLI call.
	// KURUWA_TEST_RACE=1 builds them with the race detector, so the instance daemons are checked too.
	args := []string{"build", "-o", dir + "/"}
	cgo := "CGO_ENABLED=0"
	if os.Getenv("KURUWA_TEST_RACE") == "1" {
		args, cgo = append(args, "-race"), "CGO_ENABLED=1"
	}
	build := exec.Command("go", append(args, "github.com/allox-os/allox/services/kuruwa", "github.com/allox-os/allox/services/kuruwa/cmd/kuruwad")...)
	build.Env = append(os.Environ(), cgo)
	out, err := build.CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build kuruwa: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

type fixture struct {
	t    *testing.T
	d    *daemon.Daemon
	dir  string
	stop func() // stops the daemon (and runs once)
	// manage is the management entry of a daemon run as its own process (d is nil then).
	manage string
}

// newDaemon runs a main daemon on a fresh short directory (socket paths are limited to 108
// bytes) with the given configuration, and stops it when the test ends.
func newDaemon(t *testing.T, hcl string) *fixture {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "kw")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return startIn(t, dir, hcl)
}

func startIn(t *testing.T, dir, hcl string) *fixture {
	t.Helper()
	cfg, diags := config.Parse([]byte(hcl), "test.hcl", config.Vars{RuntimeDir: dir, Kuruwa: kuruwadBin})
	if diags.HasErrors() {
		t.Fatalf("config: %v", diags)
	}
	var logs bytes.Buffer
	d, err := daemon.New(cfg, dir, kuruwadBin, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready, done := make(chan struct{}), make(chan error, 1)
	go func() { done <- d.Run(ctx, func() { close(ready) }) }()
	select {
	case <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("daemon: %v\n%s", err, logs.String())
	case <-time.After(20 * time.Second):
		t.Fatal("daemon did not start")
	}
	f := &fixture{t: t, d: d, dir: dir}
	f.stop = sync.OnceFunc(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("daemon: %v", err)
		}
	})
	t.Cleanup(f.stop)
	return f
}

// mgmt is the management entry: the in-process daemon's, or manage for a daemon run as its
// own process.
func (f *fixture) mgmt() string {
	if f.d == nil {
		return f.manage
	}
	return f.d.ManagementEntry()
}
func (f *fixture) entry(name string) string { return f.d.TenantEntry(name) }

// kw runs the CLI in-process against entry and returns stdout, or the error.
func (f *fixture) kw(entryPath string, args ...string) (string, error) {
	var out, errOut bytes.Buffer
	c := &cli.Context{Args: append([]string{"--entry", entryPath}, args...), Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errOut,
		Getenv: func(string) string { return "" }}
	err := c.Execute(context.Background())
	return out.String(), err
}

// must runs the CLI and fails the test on error.
func (f *fixture) must(entryPath string, args ...string) string {
	f.t.Helper()
	out, err := f.kw(entryPath, args...)
	if err != nil {
		f.t.Fatalf("kuruwa %v: %v", args, err)
	}
	return out
}

// dial opens a raw protocol connection on an entry.
func (f *fixture) dial(entryPath string) *wire.Conn {
	f.t.Helper()
	uc, err := entry.Dial(entryPath)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { uc.Close() })
	return wire.NewConn(uc)
}

// status is the management entry's status of terminal name.
func (f *fixture) status(name string) wire.TermInfo {
	f.t.Helper()
	var st wire.TermInfo
	if err := json.Unmarshal([]byte(f.must(f.mgmt(), "status", name, "--json")), &st); err != nil {
		f.t.Fatal(err)
	}
	return st
}

// waitScreen polls the screen of name until it contains want.
func (f *fixture) waitScreen(entryPath, name, want string) string {
	f.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	var out string
	for time.Now().Before(deadline) {
		var err error
		out, err = f.kw(entryPath, "screen", name, "--plain")
		if err == nil && strings.Contains(out, want) {
			return out
		}
		time.Sleep(20 * time.Millisecond)
	}
	f.t.Fatalf("screen of %s never showed %q; last:\n%s", name, want, out)
	return ""
}

// waitExit polls until the terminal exited and returns its status line.
func (f *fixture) waitExit(entryPath, name string) string {
	f.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		out, err := f.kw(entryPath, "status", name)
		if err == nil && strings.Contains(out, "exited(") {
			return out
		}
		time.Sleep(20 * time.Millisecond)
	}
	f.t.Fatalf("terminal %s never exited", name)
	return ""
}

func wantCode(t *testing.T, err error, code string) {
	t.Helper()
	if !errors.Is(err, &wire.Error{Code: code}) {
		t.Fatalf("got error %v, want code %s", err, code)
	}
}

func bwrap(t *testing.T) {
	testenv.Tool(t, "bwrap", "apt-get install bubblewrap (ci/deps.sh)")
}

// boxConfig declares a bubblewrap definition that hides the daemon's directory from terminals,
// a plain definition whose init is env (the instance daemon runs in the daemon's environment),
// and a tenant "agent" that may instantiate both.
const boxConfig = `
definition "box" {
  init = ["bwrap", "--die-with-parent", "--unshare-pid", "--ro-bind", "/", "/", "--dev", "/dev",
          "--proc", "/proc", "--tmpfs", runtime_dir, "--"]
}
definition "plain" {
  init = ["env"]
}
tenant "agent" {
  definitions = ["box", "plain"]
}
tenant "other" {}
`

func itoa(n int) string                             { return strconv.Itoa(n) }
func atoi(s string) int                             { n, _ := strconv.Atoi(s); return n }
func asExit(err error, target **cli.ExitError) bool { return errors.As(err, target) }
