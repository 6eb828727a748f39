package qemutests

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/allox-os/allox/internal/limit"
	"github.com/allox-os/allox/internal/rpc"
)

// TestResourceLimitsInGuest attacks the resource limits of the booted appliance (its real cgroup
// v2 controllers): limits the spec does not allow are refused, allowed ones reach the session's
// cgroup files, a fork bomb in one session's run is bounded by pids.max and ends pids_limit, a
// memory bomb is killed oom_killed, and meanwhile another session's checkpoint.create and
// session.rollback still answer and the daemon survives. Each part fails if the limit does not
// hold.
func TestResourceLimitsInGuest(t *testing.T) {
	a := needAppliance(t, imageMode)
	ctx := testContext(t, 4*bootBudget)
	b := a.boot(ctx, t, imageMode, blankDisk(t))
	b.waitReady(ctx, t)

	info := b.limitsInForce(ctx, t)
	b.call(ctx, t, rpc.ActionAgentCreate, map[string]any{"agent_id": "lim"})
	b.call(ctx, t, rpc.ActionSessionCreate, map[string]any{"agent_id": "lim", "session_id": "other"})
	b.call(ctx, t, rpc.ActionCheckpointCreate, map[string]any{"agent_id": "lim", "session_id": "other", "checkpoint_id": "c0"})
	before := b.otherSessionWorks(ctx, t, "c-before")
	t.Logf("other session, quiet guest: checkpoint.create + session.rollback %v", before)

	t.Run("session limits are bounded and applied", func(t *testing.T) {
		err := b.rpc.Call(ctx, rpc.ActionSessionCreate, map[string]any{"agent_id": "lim", "session_id": "greedy",
			"limits": map[string]any{"memory_max": int64(64 << 30)}}, nil)
		var re *rpc.Error
		if !errors.As(err, &re) || re.Code != rpc.CodeInvalidParams || re.Field != "params.limits.memory_max" || !strings.Contains(re.Message, "exceeds the maximum 16GiB") {
			t.Errorf("session.create with memory_max 64GiB: %v; want invalid_params naming params.limits.memory_max and the 16GiB bound", err)
		}
		if err := b.rpc.Call(ctx, rpc.ActionSessionGet, map[string]any{"agent_id": "lim", "session_id": "greedy"}, nil); err == nil {
			t.Error("the refused session exists")
		}
		var s rpc.Session
		b.call(ctx, t, rpc.ActionSessionCreate, map[string]any{"agent_id": "lim", "session_id": "victim",
			"limits": map[string]any{"pids_max": 64, "memory_max": 128 << 20, "cpu_weight": 50}}, &s)
		want := limit.Set{PidsMax: 64, MemoryMax: 128 << 20, MemorySwapMax: limit.Int64(0), CPUWeight: 50}
		if s.Limits == nil || *s.Limits != (limit.Set{PidsMax: 64, MemoryMax: 128 << 20, MemorySwapMax: s.Limits.MemorySwapMax, CPUWeight: 50}) ||
			s.Limits.MemorySwapMax == nil || *s.Limits.MemorySwapMax != 0 {
			t.Errorf("session.create limits = %+v, want %+v", s.Limits, want)
		}
		// The session's group exists from its first run on; a run also shows its oom_score_adj.
		if got := b.runIn(ctx, t, "victim", "cat", "/proc/self/oom_score_adj"); got.stdout != strconv.Itoa(info.Limits.RunOOMScoreAdj)+"\n" {
			t.Errorf("a run's oom_score_adj = %q, want %d", got.stdout, info.Limits.RunOOMScoreAdj)
		}
		if got := b.runIn(ctx, t, "victim", "/bin/sh", "-c", "echo -1000 > /proc/self/oom_score_adj"); got.exit == 0 {
			t.Errorf("a run lowered its own oom_score_adj below the daemon's")
		}
		b.call(ctx, t, rpc.ActionSessionGet, map[string]any{"agent_id": "lim", "session_id": "victim"}, &s)
		t.Logf("victim's cgroup files: %v", s.CgroupFiles)
		for file, want := range map[string]string{"pids.max": "64", "memory.max": "134217728", "memory.swap.max": "0", "cpu.weight": "50"} {
			if got := s.CgroupFiles[file]; got != want {
				t.Errorf("session cgroup %s = %q, want %q", file, got, want)
			}
		}
	})

	t.Run("fork bomb is bounded by pids.max", func(t *testing.T) {
		tasksBefore := b.tasks(ctx, t)
		// The bomb churns below pids.max (bwrap's init reaps its orphans, so it outlives the main
		// process, which execs timeout and exits non-zero); the run's own timeout ends it.
		r := b.startIn(ctx, t, "victim", 30, "/bin/sh", "-c", `b(){ b|b& }; b; exec timeout 15 sleep 1000`)
		maxTasks, maxPids := 0, 0
		for i := 0; i < 5; i++ {
			maxTasks = max(maxTasks, b.tasks(ctx, t))
			var s rpc.Session
			b.call(ctx, t, rpc.ActionSessionGet, map[string]any{"agent_id": "lim", "session_id": "victim"}, &s)
			n, _ := strconv.Atoi(s.CgroupFiles["pids.current"])
			maxPids = max(maxPids, n)
			if i == 1 {
				took := b.otherSessionWorks(ctx, t, "c-fork")
				t.Logf("other session during the fork bomb: checkpoint.create + session.rollback %v (quiet: %v)", took, before)
			}
		}
		r = b.wait(ctx, t, r)
		var s rpc.Session
		b.call(ctx, t, rpc.ActionSessionGet, map[string]any{"agent_id": "lim", "session_id": "victim"}, &s)
		t.Logf("fork bomb: %s (%s); guest tasks %d before, at most %d during; session pids.current at most %d, pids.peak %s",
			r.State, r.Reason, tasksBefore, maxTasks, maxPids, s.CgroupFiles["pids.peak"])
		if r.State != "pids_limit" {
			t.Errorf("fork bomb ended %q (%s), want pids_limit", r.State, r.Reason)
		}
		if maxPids > 64 {
			t.Errorf("session pids.current reached %d, above its pids.max 64", maxPids)
		}
		if peak, err := strconv.Atoi(s.CgroupFiles["pids.peak"]); err == nil && (peak > 64 || peak < 32) {
			t.Errorf("session pids.peak = %d: want the bomb to reach, and stay at, pids.max 64", peak)
		}
		if maxTasks > tasksBefore+64+64 {
			t.Errorf("guest tasks reached %d (from %d): the bomb was not bounded", maxTasks, tasksBefore)
		}
	})

	t.Run("memory bomb is killed oom_killed", func(t *testing.T) {
		// tail (busybox's) keeps the last 512 MiB of an endless input in memory: it grows until
		// memory.max (128 MiB). Less than the guest's RAM, so that the allocation itself succeeds.
		r := b.startIn(ctx, t, "victim", 120, "/bin/sh", "-c", `tail -c 536870912 /dev/zero; echo "tail exited $?" >&2; exit 3`)
		took := b.otherSessionWorks(ctx, t, "c-mem")
		t.Logf("other session during the memory bomb: checkpoint.create + session.rollback %v (quiet: %v)", took, before)
		r = b.wait(ctx, t, r)
		var stderr rpc.Output
		b.call(ctx, t, rpc.ActionProcessOutput, map[string]any{"run_id": r.RunID, "stream": "stderr"}, &stderr)
		exit := -1
		if r.ExitCode != nil {
			exit = *r.ExitCode
		}
		t.Logf("memory bomb: %s (%s), exit %d, stderr %q", r.State, r.Reason, exit, stderr.Data)
		if r.State != "oom_killed" {
			t.Errorf("memory bomb ended %q (%s), want oom_killed", r.State, r.Reason)
		}
		var after rpc.SystemInfo
		b.call(ctx, t, rpc.ActionSystemInfo, nil, &after)
		if after.Daemon.Pid != info.Daemon.Pid || after.BootID != info.BootID {
			t.Errorf("the daemon did not survive: pid %d → %d, boot %s → %s", info.Daemon.Pid, after.Daemon.Pid, info.BootID, after.BootID)
		}
		b.otherSessionWorks(ctx, t, "c-after")
	})
	b.powerOff(context.WithoutCancel(ctx), t)
}

// limitsInForce checks, through system.info, that every limit is really in force in the guest and
// that the control plane is protected, and returns the info.
func (b *booted) limitsInForce(ctx context.Context, t *testing.T) rpc.SystemInfo {
	t.Helper()
	var info rpc.SystemInfo
	b.call(ctx, t, rpc.ActionSystemInfo, nil, &info)
	l := info.Limits
	if l == nil {
		t.Fatal("system.info has no limits: the daemon applies none")
	}
	t.Logf("limits: controllers %v, enforced %v, skipped %v, all runs memory.max %s; daemon %+v",
		l.Controllers, l.Enforced, l.Skipped, l.RunsMemoryMax, info.Daemon)
	if !slices.Equal(l.Enforced, limit.Fields) {
		t.Errorf("limits in force = %v (skipped %v), want all of %v: the guest kernel has every controller", l.Enforced, l.Skipped, limit.Fields)
	}
	if n, err := strconv.ParseInt(l.RunsMemoryMax, 10, 64); err != nil || n <= 0 {
		t.Errorf("all runs' memory.max = %q, want MemTotal minus the reserve", l.RunsMemoryMax)
	}
	if d := info.Daemon; d.Cgroup != "/system/workspace-daemon" || d.MemoryLow != strconv.Itoa(64<<20) || d.OOMScoreAdj != -997 {
		t.Errorf("daemon protection: cgroup %q memory.low %q oom_score_adj %d; want /system/workspace-daemon, %d, -997", d.Cgroup, d.MemoryLow, d.OOMScoreAdj, 64<<20)
	}
	return info
}

// otherSessionWorks checkpoints the session "other" and rolls it back to c0, and returns how long
// the two calls took (logged, never asserted: a timing is no test).
func (b *booted) otherSessionWorks(ctx context.Context, t *testing.T, checkpoint string) time.Duration {
	t.Helper()
	start := time.Now()
	b.call(ctx, t, rpc.ActionCheckpointCreate, map[string]any{"agent_id": "lim", "session_id": "other", "checkpoint_id": checkpoint})
	b.call(ctx, t, rpc.ActionSessionRollback, map[string]any{"agent_id": "lim", "session_id": "other", "checkpoint_id": "c0"})
	return time.Since(start).Round(time.Millisecond)
}

func (b *booted) tasks(ctx context.Context, t *testing.T) int {
	t.Helper()
	var info rpc.SystemInfo
	b.call(ctx, t, rpc.ActionSystemInfo, nil, &info)
	return info.Tasks
}

// startIn starts argv in a session with a timeout in seconds.
func (b *booted) startIn(ctx context.Context, t *testing.T, session string, timeout int, argv ...string) rpc.Run {
	t.Helper()
	var r rpc.Run
	b.call(ctx, t, rpc.ActionProcessStart, map[string]any{"agent_id": "lim", "session_id": session, "argv": argv, "timeout": timeout}, &r)
	return r
}

func (b *booted) wait(ctx context.Context, t *testing.T, r rpc.Run) rpc.Run {
	t.Helper()
	b.call(ctx, t, rpc.ActionProcessWait, map[string]any{"run_id": r.RunID}, &r)
	return r
}

// runIn runs argv in a session and returns its exit code (-1 without one) and stdout.
func (b *booted) runIn(ctx context.Context, t *testing.T, session string, argv ...string) runResult {
	t.Helper()
	r := b.wait(ctx, t, b.startIn(ctx, t, session, 120, argv...))
	res := runResult{exit: -1}
	if r.ExitCode != nil {
		res.exit = *r.ExitCode
	}
	var out rpc.Output
	b.call(ctx, t, rpc.ActionProcessOutput, map[string]any{"run_id": r.RunID}, &out)
	res.stdout = out.Data
	return res
}
