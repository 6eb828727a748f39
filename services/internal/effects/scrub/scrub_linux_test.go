package scrub

import (
	"context"
	"errors"
	"github.com/allox-os/allox/internal/cgroup/cgrouptest"
	"github.com/allox-os/allox/internal/testenv"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestRuntime runs a process in a real run cgroup (in a child group) and a
// neighbour run beside it, then scrubs the first run: its processes die,
// its groups and staging go, and the session group, the neighbour run and
// the workspace stay untouched.
func TestRuntime(t *testing.T) {
	testenv.Root(t, "for cgroups", "./services/internal/effects/scrub")
	session := newCgroup(t)
	run, other := filepath.Join(session, "run-1"), filepath.Join(session, "run-2")
	for _, d := range []string{run, filepath.Join(run, "child"), other} {
		must(t, os.Mkdir(d, 0o755))
	}
	victim := startIn(t, filepath.Join(run, "child"))
	neighbour := startIn(t, other)

	base := t.TempDir()
	staging, workspaceTmp := filepath.Join(base, "records", "run-1", "tmp"), filepath.Join(base, "current", ".allox-tmp")
	for _, d := range []string{staging, workspaceTmp} {
		must(t, os.MkdirAll(d, 0o755))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := Runtime(ctx, run, staging); err != nil {
		t.Fatalf("Runtime: %v", err)
	}
	if err := victim.Wait(); err == nil {
		t.Error("the run's process exited cleanly; want it killed")
	}
	for _, gone := range []string{run, staging} {
		if _, err := os.Stat(gone); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still there after the scrub: %v", gone, err)
		}
	}
	for _, kept := range []string{session, other, workspaceTmp} {
		if _, err := os.Stat(kept); err != nil {
			t.Errorf("%s touched by the scrub: %v", kept, err)
		}
	}
	if err := neighbour.Process.Signal(syscall.Signal(0)); err != nil {
		t.Errorf("the neighbour run's process was killed: %v", err)
	}
	if err := Runtime(ctx, run, staging); err != nil {
		t.Errorf("a second scrub of a scrubbed run: %v", err)
	}
}

func startIn(t *testing.T, group string) *exec.Cmd {
	t.Helper()
	fd, err := os.Open(group)
	must(t, err)
	defer fd.Close()
	cmd := exec.Command("/bin/sleep", "60")
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(fd.Fd())}
	must(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd
}

func newCgroup(t *testing.T) string { return cgrouptest.New(t, "allox-scrub-test") }

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
