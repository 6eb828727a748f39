// Package testenv is the one place that decides what a test does when something it needs of the
// machine is missing — root, a tool, loop devices, cgroup v2, build outputs, the cached kernel:
// it skips, saying what to run, or, with CI=true (where nothing the README promises may skip),
// it fails. Tests ask it instead of deciding for themselves, and every test that reads build
// outputs finds them through Out. It also reads streams for tests that wait on one (ReadUntil),
// and tells whether a process still runs (Running).
package testenv

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/procfs"
)

// InCI reports whether CI runs the tests (CI=true): then nothing may skip.
func InCI() bool { return os.Getenv("CI") == "true" }

// Unavailable stops a test whose prerequisite is missing: a failure in CI, elsewhere a skip
// whose message says what to install or run.
func Unavailable(tb testing.TB, format string, args ...any) {
	tb.Helper()
	msg := fmt.Sprintf(format, args...)
	if InCI() {
		tb.Fatal(msg + " (CI=true: nothing may skip)")
		return
	}
	tb.Skip(msg)
}

// Root stops the test unless it runs as root; why says what root is for ("to load BPF
// programs"), pkg is the package to rerun ("./services/internal/proctree").
func Root(tb testing.TB, why, pkg string) {
	tb.Helper()
	if os.Geteuid() != 0 {
		Unavailable(tb, "needs root %s; run: sudo go test %s", why, pkg)
	}
}

// Tool stops the test unless name is on PATH, and returns its path; install says how to get it
// ("apt-get install bubblewrap").
func Tool(tb testing.TB, name, install string) string {
	tb.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		Unavailable(tb, "needs %s: %s", name, install)
	}
	return p
}

// Out is where mkimage wrote the artifacts: $ALLOX_OUT, else out/ at the module's root.
func Out() string {
	if d := os.Getenv("ALLOX_OUT"); d != "" {
		return d
	}
	dir, err := os.Getwd()
	if err != nil {
		return "out"
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return filepath.Join(d, "out")
		}
		if filepath.Dir(d) == d {
			return filepath.Join(dir, "out")
		}
	}
}

// NeedOut stops the test unless every file (relative to Out) exists, and returns Out. With
// -short (make unit: no image, no QEMU) it skips, built artifacts or not.
func NeedOut(tb testing.TB, files ...string) string {
	tb.Helper()
	out := Out()
	if testing.Short() {
		tb.Skip("-short (make unit) runs nothing that needs the built image: make test runs it")
		return out
	}
	for _, f := range files {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			Unavailable(tb, "no built artifacts in %s (%v): run `make image` (or set ALLOX_OUT)", out, err)
		}
	}
	return out
}

// ReadUntil reads r until what it has read contains want and returns all of it; it fails the
// test when r ends first or after 30 s. The read goes on in a goroutine: the test does not hang
// on a stream that never delivers.
func ReadUntil(tb testing.TB, r io.Reader, want string) string {
	tb.Helper()
	got := make(chan string, 1)
	go func() {
		var all []byte
		buf := make([]byte, 4096)
		for {
			n, err := r.Read(buf)
			all = append(all, buf[:n]...)
			if strings.Contains(string(all), want) || err != nil {
				got <- string(all)
				return
			}
		}
	}()
	select {
	case s := <-got:
		if !strings.Contains(s, want) {
			tb.Fatalf("the stream ended without %q; it had %q", want, s)
		}
		return s
	case <-time.After(30 * time.Second):
		tb.Fatalf("no %q on the stream within 30 s", want)
		return ""
	}
}

// Percentile is the p-th percentile of ds by the nearest rank at or below it (p 50: the median's
// lower middle for an even count), for the benchmarks' figures.
func Percentile(ds []time.Duration, p int) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[(len(s)-1)*p/100]
}

// Running reports whether pid is a process that has not exited. A killed process that is not the
// caller's child stays a zombie until whoever reaps orphans gets to it, and counts as exited.
func Running(pid int) bool {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return false
	}
	st, err := p.Stat()
	return err == nil && st.State != "Z"
}
