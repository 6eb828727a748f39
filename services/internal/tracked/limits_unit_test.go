package tracked

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/allox-os/allox/internal/limit"
	"github.com/google/go-cmp/cmp"
)

// fakeCgroups is a cgroups over a plain directory: enough for the logic of which files are
// written where, never for proving that a limit holds (the QEMU tests do that).
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
			must(t, os.WriteFile(filepath.Join(c.path(c.parent), lf.file), []byte(lf.unset), 0o644))
		}
	}
	return c
}

func readTree(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	must(t, filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(root, p)
		out[rel] = string(b)
		return err
	}))
	return out
}

func TestSetupWritesLimitsDownTheTree(t *testing.T) {
	c := fakeCgroups(t, "cpu", "memory", "pids")
	sess := limit.Set{PidsMax: 4096, MemoryMax: 1 << 30, MemorySwapMax: limit.Int64(0)}
	c.limits = limitConfig{run: limit.Set{PidsMax: 1024, MemoryMax: 2 << 30, CPUWeight: 200},
		session: func(a, s string) (limit.Set, error) { return sess, nil }}
	f, err := c.create("/allox/a/s/r1")
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	got := readTree(t, c.path(c.parent))
	want := map[string]string{
		"pids.max": "max", "memory.max": "max", "memory.swap.max": "max", "cpu.weight": "100",
		"cgroup.subtree_control":     "+cpu +memory +pids",
		"a/cgroup.subtree_control":   "+cpu +memory +pids",
		"a/s/cgroup.subtree_control": "+cpu +memory +pids",
		"a/s/pids.max":               "4096",
		"a/s/memory.max":             "1073741824",
		"a/s/memory.swap.max":        "0",
		"a/s/cpu.weight":             "100",
		"a/s/r1/pids.max":            "1024",
		"a/s/r1/memory.max":          "1073741824", // capped by the session
		"a/s/r1/memory.swap.max":     "0",          // the session's
		"a/s/r1/cpu.weight":          "200",
		"a/s/r1/memory.oom.group":    "1",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("cgroup files (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(limit.Fields, c.enforced()); diff != "" {
		t.Errorf("enforced (-want +got):\n%s", diff)
	}
}

// TestSetupWithoutControllers: a hybrid host, whose v2 hierarchy has no controllers, gets the
// groups and no limit files, and reports nothing in force.
func TestSetupWithoutControllers(t *testing.T) {
	c := fakeCgroups(t)
	c.limits = limitConfig{run: limit.Set{PidsMax: 1024}}
	f, err := c.create("/allox/a/s/r1")
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if got := readTree(t, c.path(c.parent)); len(got) != 0 {
		t.Errorf("files written without controllers: %v", got)
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

func TestParseKeyed(t *testing.T) {
	m, err := parseKeyed(strings.NewReader("low 0\nhigh 0\nmax 12\noom 1\noom_kill 2\noom_group_kill 1\n"))
	if err != nil {
		t.Fatal(err)
	}
	if m["oom_kill"] != 2 || m["max"] != 12 || len(m) != 6 {
		t.Errorf("parseKeyed = %v", m)
	}
	for _, bad := range []string{"max\n", "max x\n", "a 1 2\n"} {
		if _, err := parseKeyed(strings.NewReader(bad)); err == nil {
			t.Errorf("parseKeyed(%q) accepted", bad)
		}
	}
}

func TestEvents(t *testing.T) {
	c := fakeCgroups(t)
	dir := c.path("/allox/a/s/r")
	must(t, os.MkdirAll(dir, 0o755))
	if ev, err := c.events("/allox/a/s/r"); err != nil || ev != (limitEvents{}) {
		t.Errorf("without files: %+v, %v", ev, err)
	}
	must(t, os.WriteFile(filepath.Join(dir, "memory.events"), []byte("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "pids.events"), []byte("max 7\n"), 0o644))
	if ev, err := c.events("/allox/a/s/r"); err != nil || ev != (limitEvents{OOMKills: 1, PidsLimit: 7}) {
		t.Errorf("events = %+v, %v", ev, err)
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
