package tracked

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestGateHoldsCommand checks that the command has not run while the gate
// is called (bwrap waits on --block-fd) and runs once it passes.
func TestGateHoldsCommand(t *testing.T) {
	e := newEnv(t, nil)
	marker := filepath.Join(e.ws.Current, "ran")
	var gotPid int
	e.m.SetGate(func(runID string, pid int) error {
		gotPid = pid
		if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the command ran before the gate passed: %v", err)
		}
		b, err := os.ReadFile(filepath.Join(e.m.CgroupDir("a", "s1", runID), "cgroup.procs"))
		if err != nil || len(b) == 0 {
			t.Errorf("bwrap is not in the run cgroup at the gate: %q %v", b, err)
		}
		return nil
	})
	st := e.run(t, e.req("s1", "/bin/sh", "-c", "touch ran; exit 5"))
	if st.State != StateExited || st.ExitCode != 5 || gotPid != st.Pid {
		t.Fatalf("status = %+v (gate pid %d), want exited 5 with the gate given bwrap's pid", st, gotPid)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Errorf("the command did not run after the gate: %v", err)
	}
}

// TestGateFailsClosed checks that a failing gate kills the run before its
// command runs and fails the start.
func TestGateFailsClosed(t *testing.T) {
	e := newEnv(t, nil)
	boom := errors.New("collector gone")
	var cg string
	e.m.SetGate(func(runID string, _ int) error { cg = e.m.CgroupDir("a", "s1", runID); return boom })
	_, err := e.m.Start(context.Background(), e.req("s1", "/bin/sh", "-c", "touch ran"))
	if !errors.Is(err, ErrSandbox) || !errors.Is(err, boom) {
		t.Fatalf("Start = %v, want ErrSandbox wrapping the gate's error", err)
	}
	if _, err := os.Stat(filepath.Join(e.ws.Current, "ran")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the command ran although the gate failed: %v", err)
	}
	if _, err := os.Stat(cg); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("run cgroup %s left behind: %v", cg, err)
	}
}
