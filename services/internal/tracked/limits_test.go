package tracked

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/allox-os/allox/internal/limit"
)

func TestStdinEnvCwd(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.SharedWritable = true })
	must(t, os.MkdirAll(filepath.Join(e.ws.Current, "sub"), 0o755))
	req := e.req("s1", "/bin/sh", "-c", `read line; echo "$line $FOO $(pwd)"; touch "$ALLOX_AGENT_SHARED/w"`)
	req.Stdin, req.Env, req.Cwd = []byte("in\n"), map[string]string{"FOO": "bar"}, "sub"
	st := e.run(t, req)
	want := "in bar " + filepath.Join(e.ws.Current, "sub") + "\n"
	if got := e.output(t, st.RunID, "stdout"); got != want || st.ExitCode != 0 {
		t.Errorf("stdout = %q (exit %d, stderr %q), want %q", got, st.ExitCode, e.output(t, st.RunID, "stderr"), want)
	}
	if _, err := os.Stat(filepath.Join(e.ws.Shared, "w")); err != nil {
		t.Errorf("SharedWritable: write to shared/ did not land: %v", err)
	}
}

// TestLimitsOptional: limits apply where the controller exists (the guest)
// and are skipped without failing the run where it does not (a hybrid host).
func TestLimitsOptional(t *testing.T) {
	e := newEnv(t, func(c *Config) {
		c.RunLimits = limit.Set{MemoryMax: 256 << 20, PidsMax: 128, CPUWeight: 50}
		c.SessionLimits = func(agent, session string) (limit.Set, error) {
			return limit.Set{MemoryMax: 128 << 20, PidsMax: 512}, nil
		}
	})
	st, err := e.m.Start(context.Background(), e.req("s1", "sleep", "100"))
	if err != nil {
		t.Fatalf("Start with limits: %v", err)
	}
	waitProcs(t, st.Cgroup, 3)
	enforced := e.m.Enforced()
	t.Logf("limits in force at %s: %v", e.cfg.CgroupMount, enforced)
	for ctrl, file := range map[string]string{"memory": "memory.max", "pids": "pids.max", "cpu": "cpu.weight"} {
		b, err := os.ReadFile(filepath.Join(st.Cgroup, file))
		if !e.m.cg.controllers[ctrl] {
			t.Logf("%s controller not available at %s: limit skipped", ctrl, e.cfg.CgroupMount)
			continue
		}
		// memory is capped by the session (128 MiB < 256 MiB), pids is the run's own.
		want := map[string]string{"memory": "134217728", "pids": "128", "cpu": "50"}[ctrl]
		if err != nil || strings.TrimSpace(string(b)) != want {
			t.Errorf("%s = %q, %v; want %s", file, b, err, want)
		}
	}
	must(t, e.m.Kill(st.RunID))
	if st, err = e.m.Wait(context.Background(), st.RunID); err != nil || st.State != StateKilled {
		t.Errorf("after Kill: %+v, %v", st, err)
	}
}

// TestRunCannotLowerOOMScoreAdj: a run starts at RunOOMScoreAdj, written by the daemon, and cannot
// go below it — in particular not to the daemon's own protected value.
func TestRunCannotLowerOOMScoreAdj(t *testing.T) {
	e := newEnv(t, nil)
	st := e.run(t, e.req("s1", "/bin/sh", "-c", `cat /proc/self/oom_score_adj; echo -997 > /proc/self/oom_score_adj && echo lowered; cat /proc/self/oom_score_adj`))
	out := e.output(t, st.RunID, "stdout")
	if out != "500\n500\n" {
		t.Errorf("stdout = %q (stderr %q), want 500 twice and no \"lowered\"", out, e.output(t, st.RunID, "stderr"))
	}
}
