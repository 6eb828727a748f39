package cgroup

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/allox-os/allox/internal/testenv"
	"github.com/containerd/cgroups/v3/cgroup2"
	"github.com/google/go-cmp/cmp"
)

// parent makes a fresh group below the root of the real cgroup2 mount and removes its tree at
// the end.
func parent(t *testing.T) (mount, path string) {
	t.Helper()
	testenv.Root(t, "to make cgroups", "./internal/cgroup")
	mount, err := DetectMount()
	if err != nil {
		testenv.Unavailable(t, "needs cgroup v2: %v", err)
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	path = "/allox-cgroup-test-" + hex.EncodeToString(b[:])
	g, err := Create(mount, path, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := g.DeleteTree(ctx); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return mount, path
}

func create(t *testing.T, mount, path string) *Group {
	t.Helper()
	g, err := Create(mount, path, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// start runs argv born inside g (clone3 CLONE_INTO_CGROUP on Open's directory).
func start(t *testing.T, g *Group, argv ...string) *exec.Cmd {
	t.Helper()
	dir, err := g.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(dir.Fd())}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestOpenStartsInsideAndProcsListsIt(t *testing.T) {
	mount, p := parent(t)
	g := create(t, mount, p+"/run")
	cmd := start(t, g, "sleep", "100")
	procs, err := g.Procs()
	if err != nil || !slices.Contains(procs, uint64(cmd.Process.Pid)) {
		t.Fatalf("Procs = %v, %v; want pid %d", procs, err, cmd.Process.Pid)
	}
	b, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(cmd.Process.Pid), "cgroup"))
	if !strings.Contains(string(b), p+"/run\n") {
		t.Errorf("/proc/pid/cgroup = %q, want it in %s/run", b, p)
	}
	if pop, err := g.Populated(); err != nil || !pop {
		t.Errorf("Populated = %v, %v; want true", pop, err)
	}
}

// TestFreezeThaw: a frozen group's shell stops appending to a file and reports frozen; thawed,
// it goes on.
func TestFreezeThaw(t *testing.T) {
	mount, p := parent(t)
	g := create(t, mount, p+"/run")
	out := filepath.Join(t.TempDir(), "ticks")
	start(t, g, "/bin/sh", "-c", `while :; do echo x >> "$0"; sleep 0.01; done`, out)
	grows := func() bool {
		a, _ := os.ReadFile(out)
		time.Sleep(200 * time.Millisecond)
		b, _ := os.ReadFile(out)
		return len(b) > len(a)
	}
	if !grows() {
		t.Fatal("the shell does not run")
	}
	if err := g.Freeze(ctxT(t), true); err != nil {
		t.Fatal(err)
	}
	if f, err := g.Frozen(); err != nil || !f {
		t.Errorf("after Freeze: Frozen = %v, %v", f, err)
	}
	if grows() {
		t.Error("a frozen group's shell goes on writing")
	}
	if err := g.Freeze(ctxT(t), false); err != nil {
		t.Fatal(err)
	}
	if f, err := g.Frozen(); err != nil || f {
		t.Errorf("after thaw: Frozen = %v, %v", f, err)
	}
	if !grows() {
		t.Error("a thawed group's shell does not go on")
	}
}

func TestFreezeEmptyGroupAtOnce(t *testing.T) {
	mount, p := parent(t)
	g := create(t, mount, p+"/empty")
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := g.Freeze(ctx, true); err != nil {
		t.Fatal(err)
	}
	if f, _ := g.Frozen(); !f {
		t.Error("empty group not frozen")
	}
}

// TestKillWaitAndDeleteTree: processes in a group and in the groups below it (frozen ones too)
// are all killed, KillWait returns once the tree is empty, DeleteTree removes every group.
func TestKillWaitAndDeleteTree(t *testing.T) {
	mount, p := parent(t)
	top := create(t, mount, p+"/a")
	var cmds []*exec.Cmd
	for _, sub := range []string{"/a/s1/r1", "/a/s1/r2", "/a/s2/r1"} {
		cmds = append(cmds, start(t, create(t, mount, p+sub), "sleep", "100"))
	}
	frozen, _ := Load(mount, p+"/a/s2/r1")
	if err := frozen.Freeze(ctxT(t), true); err != nil {
		t.Fatal(err)
	}
	if err := top.DeleteTree(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if pop, err := top.Populated(); err != nil || pop {
		t.Errorf("after DeleteTree: Populated = %v, %v", pop, err)
	}
	for _, c := range cmds {
		err := c.Wait()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Errorf("sleep %d: %v, want killed by SIGKILL", c.Process.Pid, err)
		}
	}
	if top.Exists() {
		t.Errorf("%s still exists", top.Dir())
	}
	parentGroup, _ := Load(mount, p)
	if kids, err := parentGroup.Children(); err != nil || len(kids) != 0 {
		t.Errorf("children of the parent = %v, %v; want none", kids, err)
	}
}

func TestKillWaitWaitsUntilEmpty(t *testing.T) {
	mount, p := parent(t)
	g := create(t, mount, p+"/run")
	// Twenty processes do not all go the moment cgroup.kill returns.
	for range 20 {
		start(t, g, "sleep", "100")
	}
	if err := g.KillWait(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if pop, _ := g.Populated(); pop {
		t.Error("KillWait returned with the group populated")
	}
	if procs, err := g.Procs(); err != nil || len(procs) != 0 {
		t.Errorf("Procs after KillWait = %v, %v", procs, err)
	}
	if err := g.Delete(); err != nil || g.Exists() {
		t.Errorf("Delete = %v, exists %v", err, g.Exists())
	}
}

func TestDeleteRefusesGroupWithProcesses(t *testing.T) {
	mount, p := parent(t)
	g := create(t, mount, p+"/run")
	start(t, g, "sleep", "100")
	if err := g.Delete(); err == nil || !g.Exists() {
		t.Errorf("Delete of a populated group = %v (exists %v), want an error and the group kept", err, g.Exists())
	}
}

func TestMissingGroupIsNoError(t *testing.T) {
	mount, p := parent(t)
	g, err := Load(mount, p+"/gone")
	if err != nil {
		t.Fatal(err)
	}
	for name, f := range map[string]func() error{
		"Kill":       g.Kill,
		"KillWait":   func() error { return g.KillWait(ctxT(t)) },
		"Delete":     g.Delete,
		"DeleteTree": func() error { return g.DeleteTree(ctxT(t)) },
	} {
		if err := f(); err != nil {
			t.Errorf("%s of a missing group: %v", name, err)
		}
	}
	if pop, err := g.Populated(); err != nil || pop {
		t.Errorf("Populated of a missing group = %v, %v", pop, err)
	}
	if ev, err := g.Events(); err != nil || ev != (Events{}) {
		t.Errorf("Events of a missing group = %+v, %v", ev, err)
	}
	if err := g.Freeze(ctxT(t), true); err == nil {
		t.Error("Freeze of a missing group succeeded")
	}
}

// TestEnableForChildren enables, in a fresh group, a controller the host delegates to it and
// checks that a child has it (on a hybrid host hugetlb is the one controller of the v2 tree).
func TestEnableForChildren(t *testing.T) {
	mount, p := parent(t)
	g, _ := Load(mount, p)
	avail, err := g.Controllers()
	if err != nil {
		t.Fatal(err)
	}
	if len(avail) == 0 {
		testenv.Unavailable(t, "no controller is available in %s (the root's cgroup.subtree_control enables none)", g.Dir())
	}
	if err := g.EnableForChildren(avail...); err != nil {
		t.Fatal(err)
	}
	child := create(t, mount, p+"/child")
	got, err := child.Controllers()
	if err != nil || !slices.Equal(got, avail) {
		t.Errorf("child's controllers = %v, %v; want %v", got, err, avail)
	}
	sub, _ := g.Read("cgroup.subtree_control")
	if sub != strings.Join(avail, " ") {
		t.Errorf("cgroup.subtree_control = %q, want %q", sub, avail)
	}
	if err := g.EnableForChildren("nosuchcontroller"); err == nil {
		t.Error("enabling an unknown controller succeeded")
	}
}

// TestLimits writes limits where the kernel has the controllers (the guest, a pure cgroup v2
// host): the QEMU test TestResourceLimitsInGuest proves them enforced there.
func TestLimits(t *testing.T) {
	mount, p := parent(t)
	root, _ := Load(mount, "/")
	avail, _ := root.Controllers()
	pids, mem, w, oom := int64(64), int64(128<<20), uint64(50), true
	limits := Limits{PidsMax: &pids, MemoryMax: &mem, CPUWeight: &w, OOMGroup: &oom}
	for _, c := range []string{"cpu", "memory", "pids"} {
		if !slices.Contains(avail, c) {
			// A hybrid host (this build machine): limits need the controllers, so asking for them
			// must fail, and leave no group behind. TestCgroupPackageInGuest runs the rest on the
			// guest's pure cgroup v2.
			if _, err := Create(mount, p+"/s/r", limits); err == nil {
				t.Fatalf("Create with limits succeeded without the %s controller at %s", c, mount)
			}
			if _, err := os.Stat(filepath.Join(mount, p, "s", "r")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("a failed Create left its group: %v", err)
			}
			return
		}
	}
	g, err := Create(mount, p+"/s/r", limits)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"pids.max": "64", "memory.max": "134217728", "cpu.weight": "50", "memory.oom.group": "1"}
	check := func() {
		t.Helper()
		got := map[string]string{}
		for f := range want {
			got[f], _ = g.Read(f)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("limit files (-want +got):\n%s", diff)
		}
	}
	check()
	no, def := NoLimit, uint64(100)
	if err := g.Update(Limits{PidsMax: &no, MemoryMax: &no, CPUWeight: &def}); err != nil {
		t.Fatal(err)
	}
	want = map[string]string{"pids.max": "max", "memory.max": "max", "cpu.weight": "100", "memory.oom.group": "1"}
	check()
}

func TestLimitsValidate(t *testing.T) {
	i := func(v int64) *int64 { return &v }
	u := func(v uint64) *uint64 { return &v }
	for _, tc := range []struct {
		l    Limits
		want string
	}{
		{Limits{PidsMax: i(0)}, "pids.max 0"},
		{Limits{PidsMax: i(-2)}, "pids.max -2"},
		{Limits{MemoryMax: i(-5)}, "memory.max -5"},
		{Limits{SwapMax: i(-5)}, "memory.swap.max -5"},
		{Limits{CPUWeight: u(0)}, "cpu.weight 0"},
		{Limits{CPUWeight: u(10001)}, "cpu.weight 10001"},
	} {
		// Create refuses before it makes anything: the mount does not exist.
		_, err := Create("/nonexistent-cgroup-mount", "/g", tc.l)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Create(%+v) = %v, want an error naming %q", tc.l, err, tc.want)
		}
	}
	if _, err := os.Stat("/nonexistent-cgroup-mount"); err == nil {
		t.Error("a refused Create made a directory")
	}
}

// TestResources: what the library is asked to write; NoLimit memory becomes MaxInt64, which the
// kernel shows as "max" (TestLimits, in the guest).
func TestResources(t *testing.T) {
	i := func(v int64) *int64 { return &v }
	yes := true
	max := int64(math.MaxInt64)
	got := Limits{PidsMax: i(NoLimit), MemoryMax: i(NoLimit), SwapMax: i(0), OOMGroup: &yes}.resources()
	want := &cgroup2.Resources{Pids: &cgroup2.Pids{Max: -1}, Memory: &cgroup2.Memory{Max: &max, Swap: i(0), OOMGroup: &yes}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("resources (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"memory", "pids"}, got.EnabledControllers()); diff != "" {
		t.Errorf("controllers (-want +got):\n%s", diff)
	}
	if got := (Limits{}).resources().EnabledControllers(); len(got) != 0 {
		t.Errorf("no limits enable %v", got)
	}
}

// TestEventsParsed reads the counters from files as the kernel writes them (the guest's QEMU
// test makes the kernel write them: a memory bomb and a fork bomb).
func TestEventsParsed(t *testing.T) {
	dir := t.TempDir()
	g, err := At(dir)
	if err != nil {
		t.Fatal(err)
	}
	if ev, err := g.Events(); err != nil || ev != (Events{}) {
		t.Errorf("without files: %+v, %v", ev, err)
	}
	write := func(f, s string) {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("memory.events", "low 0\nhigh 0\nmax 3\noom 1\noom_kill 2\noom_group_kill 1\n")
	write("pids.events", "max 7\n")
	if ev, err := g.Events(); err != nil || ev != (Events{OOMKills: 2, PidsLimit: 7}) {
		t.Errorf("Events = %+v, %v", ev, err)
	}
	for _, bad := range []string{"max\n", "max x\n", "max 1 2\n"} {
		write("pids.events", bad)
		if _, err := g.Events(); err == nil {
			t.Errorf("pids.events %q accepted", bad)
		}
	}
}

// TestRefusesPlainDirectory: the operations that write or remove refuse a directory outside
// cgroupfs, whose files the library would create or (Delete is os.RemoveAll) remove.
func TestRefusesPlainDirectory(t *testing.T) {
	dir := t.TempDir()
	keep := filepath.Join(dir, "sub", "keep")
	if err := os.MkdirAll(keep, 0o755); err != nil {
		t.Fatal(err)
	}
	g, _ := At(filepath.Join(dir, "sub"))
	no := NoLimit
	for name, f := range map[string]func() error{
		"Kill":       g.Kill,
		"KillWait":   func() error { return g.KillWait(ctxT(t)) },
		"Freeze":     func() error { return g.Freeze(ctxT(t), true) },
		"Update":     func() error { return g.Update(Limits{PidsMax: &no}) },
		"Delete":     g.Delete,
		"DeleteTree": func() error { return g.DeleteTree(ctxT(t)) },
		"Create":     func() error { _, err := Create(dir, "/sub/x", Limits{}); return err },
	} {
		if err := f(); err == nil || !strings.Contains(err.Error(), "not in a cgroup2 hierarchy") {
			t.Errorf("%s on a plain directory: %v, want it refused", name, err)
		}
	}
	ents, _ := os.ReadDir(filepath.Join(dir, "sub"))
	if len(ents) != 1 || ents[0].Name() != "keep" {
		t.Errorf("the plain directory now holds %v, want only keep", ents)
	}
}

func TestLoadRefusesBadPath(t *testing.T) {
	for _, p := range []string{"relative", "/a/../b", "/a/"} {
		if _, err := Load("/sys/fs/cgroup", p); err == nil {
			t.Errorf("Load(%q) accepted", p)
		}
	}
	if _, err := At("relative/dir"); err == nil {
		t.Error("At of a relative directory accepted")
	}
	g, _ := At(t.TempDir())
	for _, f := range []string{"../x", "a/b.max", "noddot"} {
		if _, err := g.Read(f); err == nil {
			t.Errorf("Read(%q) accepted", f)
		}
	}
}
