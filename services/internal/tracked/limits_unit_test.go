package tracked

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/allox-os/allox/internal/cgroup"
	"github.com/allox-os/allox/internal/limit"
	"github.com/google/go-cmp/cmp"
)

// fakeCgroups is a cgroups over a plain directory: enough for the logic of which limits go into
// which group, never for proving that a limit holds (the QEMU tests do that).
func fakeCgroups(t *testing.T, controllers ...string) *cgroups {
	t.Helper()
	mount := t.TempDir()
	c := &cgroups{mount: mount, parent: "/allox", controllers: map[string]bool{}}
	for _, n := range controllers {
		c.controllers[n] = true
	}
	must(t, os.MkdirAll(c.path(c.parent), 0o755))
	for _, lf := range limitFiles {
		if c.has(lf.controller) {
			must(t, os.WriteFile(filepath.Join(c.path(c.parent), lf.file), nil, 0o644))
		}
	}
	return c
}

func i64(v int64) *int64   { return &v }
func u64(v uint64) *uint64 { return &v }
func boolp(v bool) *bool   { return &v }

// TestLimitsPerGroup: the session group gets the session's limits, the run group the run's
// defaults capped by them and memory.oom.group; an unset limit is the kernel's default.
func TestLimitsPerGroup(t *testing.T) {
	c := fakeCgroups(t, "cpu", "memory", "pids")
	sess := limit.Set{PidsMax: 4096, MemoryMax: 1 << 30, MemorySwapMax: limit.Int64(0)}
	c.limits = limitConfig{run: limit.Set{PidsMax: 1024, MemoryMax: 2 << 30, CPUWeight: 200}}
	for _, tc := range []struct {
		name      string
		got, want cgroup.Limits
	}{
		{"session", c.toLimits(sess),
			cgroup.Limits{PidsMax: i64(4096), MemoryMax: i64(1 << 30), SwapMax: i64(0), CPUWeight: u64(100)}},
		{"run", c.runGroupLimits(c.runLimits(sess)),
			cgroup.Limits{PidsMax: i64(1024), MemoryMax: i64(1 << 30) /* capped by the session */, SwapMax: i64(0), CPUWeight: u64(200), OOMGroup: boolp(true)}},
		{"nothing set", c.toLimits(limit.Set{}),
			cgroup.Limits{PidsMax: i64(cgroup.NoLimit), MemoryMax: i64(cgroup.NoLimit), SwapMax: i64(cgroup.NoLimit), CPUWeight: u64(100)}},
	} {
		if diff := cmp.Diff(tc.want, tc.got); diff != "" {
			t.Errorf("%s limits (-want +got):\n%s", tc.name, diff)
		}
	}
	if diff := cmp.Diff(limit.Fields, c.enforced()); diff != "" {
		t.Errorf("enforced (-want +got):\n%s", diff)
	}
}

// TestLimitsWithoutSwap: without memory.swap.max (no swap in the kernel) that limit is neither
// written nor reported in force.
func TestLimitsWithoutSwap(t *testing.T) {
	c := fakeCgroups(t, "memory")
	must(t, os.Remove(filepath.Join(c.path(c.parent), "memory.swap.max")))
	got := c.toLimits(limit.Set{MemoryMax: 1 << 30, MemorySwapMax: limit.Int64(0)})
	if diff := cmp.Diff(cgroup.Limits{MemoryMax: i64(1 << 30)}, got); diff != "" {
		t.Errorf("limits (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{limit.MemoryMax}, c.enforced()); diff != "" {
		t.Errorf("enforced (-want +got):\n%s", diff)
	}
}

// TestLimitsWithoutControllers: a hybrid host, whose v2 hierarchy has no controllers, gets the
// groups and no limits, and reports nothing in force.
func TestLimitsWithoutControllers(t *testing.T) {
	c := fakeCgroups(t)
	if got := c.runGroupLimits(limit.Set{PidsMax: 1024}); got != (cgroup.Limits{}) {
		t.Errorf("limits without controllers: %+v", got)
	}
	if got := c.enforced(); len(got) != 0 {
		t.Errorf("enforced = %v", got)
	}
}

func TestCreateRefusesNonRunGroup(t *testing.T) {
	c := fakeCgroups(t)
	if _, err := c.create("/allox/a/s"); err == nil || !strings.Contains(err.Error(), "BUG") {
		t.Errorf("create of a session group: %v", err)
	}
}

func TestApplyEvents(t *testing.T) {
	for _, tc := range []struct {
		name   string
		st     Status
		ev     limitEvents
		killed string // the run's kill reason
		want   string
		reason string
	}{
		{"oom", Status{State: StateKilled, Signal: "killed"}, limitEvents{OOMKills: 1}, "", StateOOMKilled, "memory.max reached"},
		{"oom over a timeout", Status{State: StateTimedOut}, limitEvents{OOMKills: 2}, StateTimedOut, StateOOMKilled, "2 process(es)"},
		{"fork refused, shell failed", Status{State: StateExited, ExitCode: 2}, limitEvents{PidsLimit: 5}, "", StatePidsLimit, "5 fork(s) refused"},
		{"fork refused, killed by signal", Status{State: StateKilled, Signal: "killed"}, limitEvents{PidsLimit: 1}, "", StatePidsLimit, "pids.max"},
		{"fork bomb ended by its timeout", Status{State: StateTimedOut, Reason: "timeout reached; run cgroup killed"}, limitEvents{PidsLimit: 9}, StateTimedOut, StatePidsLimit, "9 fork(s) refused; timeout reached"},
		{"fork refused, exited 0", Status{State: StateExited}, limitEvents{PidsLimit: 1}, "", StateExited, "pids.max reached: 1 fork(s) refused"},
		{"fork refused, then process.kill", Status{State: StateKilled, Reason: "run cgroup killed"}, limitEvents{PidsLimit: 1}, StateKilled, StateKilled, "run cgroup killed; pids.max"},
		{"nothing hit", Status{State: StateExited, ExitCode: 1}, limitEvents{}, "", StateExited, ""},
	} {
		st := tc.st
		applyEvents(&st, tc.ev, tc.killed)
		if st.State != tc.want || !strings.Contains(st.Reason, tc.reason) {
			t.Errorf("%s: state %q reason %q; want %q with %q", tc.name, st.State, st.Reason, tc.want, tc.reason)
		}
	}
}

func TestMemTotal(t *testing.T) {
	n, err := memTotal(strings.NewReader("MemTotal:        1004136 kB\nMemFree:          900000 kB\n"))
	if err != nil || n != 1004136<<10 {
		t.Errorf("memTotal = %d, %v", n, err)
	}
	if _, err := memTotal(strings.NewReader("MemFree: 1 kB\n")); err == nil {
		t.Error("memTotal without MemTotal accepted")
	}
}
