package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/allox-os/allox/internal/testenv"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// session is a real test session: a workspace and shared/ on disk, a
// session cgroup on the cgroup v2 mount and the observer running in-process
// on pipes, exactly as the daemon drives the binary.
type session struct {
	t                        *testing.T
	base, ws, shared, cgroup string
	dir                      string // evidence set
	obs                      *observer
	in                       *io.PipeWriter
	out                      *bufio.Reader
	done                     chan error
}

func requireReal(t *testing.T) {
	t.Helper()
	testenv.Root(t, "for cgroups and the eBPF history recorder", "./services/system-effects-observe")
}

func start(t *testing.T, protocol int, scopeJSON string, extra ...string) *session {
	t.Helper()
	requireReal(t)
	s := &session{t: t, base: t.TempDir(), done: make(chan error, 1)}
	s.ws, s.shared, s.dir = filepath.Join(s.base, "current"), filepath.Join(s.base, "shared"), filepath.Join(s.base, "effects", "run-1")
	for _, d := range []string{s.ws, s.shared, filepath.Dir(s.dir)} {
		must(t, os.MkdirAll(d, 0o755))
	}
	s.cgroup = newCgroup(t)
	scopeFile := filepath.Join(s.base, "scope.json")
	must(t, os.WriteFile(scopeFile, []byte(scopeJSON), 0o600))
	args := append([]string{"-evidence", s.dir, "-scope", scopeFile, "-cgroup", s.cgroup, "-workspace", s.ws, "-shared", s.shared,
		"-protocol", strconv.Itoa(protocol), "-run-id", "run-1", "-agent", "agent-a", "-session", "session-1"}, extra...)
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	s.in, s.out = inW, bufio.NewReader(outR)
	t.Cleanup(func() { inW.Close() })
	if standbyMode {
		// Started as the daemon keeps it, then handed the same command line by a begin request.
		go func() { s.done <- standby(context.Background(), inR, outW); outW.Close() }()
		b, err := json.Marshal(begin{Op: "begin", Args: args})
		must(t, err)
		s.ok(string(b))
		return s
	}
	obs, err := newObserver(args)
	if err != nil {
		t.Fatalf("observer: %v", err)
	}
	s.obs = obs
	go func() { s.done <- obs.serve(context.Background(), inR, outW); outW.Close() }()
	return s
}

// standbyMode makes start run the observer as a standby (see standby) handed its command line by
// a begin request.
var standbyMode bool

// send writes one request and returns the answer line.
func (s *session) send(req string) response {
	s.t.Helper()
	if _, err := io.WriteString(s.in, req+"\n"); err != nil {
		s.t.Fatalf("send %s: %v", req, err)
	}
	line, err := s.out.ReadString('\n')
	if err != nil {
		s.t.Fatalf("answer to %s: %v", req, err)
	}
	var r response
	must(s.t, json.Unmarshal([]byte(line), &r))
	return r
}

func (s *session) ok(req string) {
	s.t.Helper()
	if r := s.send(req); !r.OK || r.Error != "" {
		s.t.Fatalf("%s → %+v, want ok", req, r)
	}
}

// exit waits for the observer to end and returns its error.
func (s *session) exit() error {
	select {
	case err := <-s.done:
		return err
	case <-time.After(30 * time.Second):
		s.t.Fatal("observer did not exit")
		return nil
	}
}

// agent runs a shell command in the session's run cgroup, in the
// workspace, and waits for it: the managed execution.
func (s *session) agent(script string) {
	s.t.Helper()
	run := filepath.Join(s.cgroup, "run-1")
	if err := os.Mkdir(run, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		s.t.Fatal(err)
	}
	fd, err := os.Open(run)
	must(s.t, err)
	defer fd.Close()
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.Dir = s.ws
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(fd.Fd())}
	if out, err := cmd.CombinedOutput(); err != nil {
		s.t.Fatalf("agent %q: %v\n%s", script, err, out)
	}
}

// verifier builds and runs a verifier binary on the set, as the daemon
// does: a separate process that reads only the evidence directory.
func (s *session) verifier(name string) (int, []byte) {
	s.t.Helper()
	bin := buildVerifier(s.t, name)
	cmd := exec.Command(bin, s.dir)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		s.t.Fatalf("%s: %v", name, err)
	}
	s.t.Logf("%s: %s", name, out)
	return cmd.ProcessState.ExitCode(), out
}

var (
	buildOnce sync.Map
	binDirs   []string
	binDir    = sync.OnceValue(func() string {
		d, _ := os.MkdirTemp("", "effects-verifiers-")
		binDirs = append(binDirs, d)
		return d
	})
)

// TestMain removes the verifier binaries the tests built.
func TestMain(m *testing.M) {
	code := m.Run()
	for _, d := range binDirs {
		os.RemoveAll(d)
	}
	os.Exit(code)
}

func buildVerifier(t *testing.T, name string) string {
	t.Helper()
	bin := filepath.Join(binDir(), name)
	once, _ := buildOnce.LoadOrStore(name, sync.OnceValue(func() error {
		cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", bin, "github.com/allox-os/allox/services/"+name)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build %s: %v\n%s", name, err, out)
		}
		return nil
	}))
	if err := once.(func() error)(); err != nil {
		t.Fatal(err)
	}
	return bin
}

func readReport(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	must(t, err)
	must(t, json.Unmarshal(b, v))
}

func newCgroup(t *testing.T) string {
	t.Helper()
	var mount string
	for _, m := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		var st unix.Statfs_t
		if unix.Statfs(m, &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC {
			mount = m
			break
		}
	}
	if mount == "" {
		t.Fatal("no cgroup v2 mount at /sys/fs/cgroup or /sys/fs/cgroup/unified")
	}
	dir := filepath.Join(mount, fmt.Sprintf("allox-observe-test-%d-%d", os.Getpid(), time.Now().UnixNano()))
	must(t, os.Mkdir(dir, 0o755))
	t.Cleanup(func() {
		_ = os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0)
		for range 200 {
			_ = os.Remove(filepath.Join(dir, "run-1"))
			if err := os.Remove(dir); err == nil || errors.Is(err, os.ErrNotExist) {
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
		t.Errorf("cgroup %s left behind", dir)
	})
	return dir
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func contains(list []string, sub string) bool {
	for _, s := range list {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}
