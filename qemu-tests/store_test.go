package qemutests

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/allox-os/allox/internal/rpc"
)

// storeGuest drives one booted appliance for the store tests; t is the (sub)test being run.
type storeGuest struct {
	t   *testing.T
	ctx context.Context
	b   *booted
}

func (g *storeGuest) must(action string, params map[string]any, res any) {
	g.t.Helper()
	if err := g.b.rpc.Call(g.ctx, action, params, res); err != nil {
		g.t.Fatalf("%s %v: %v", action, params, err)
	}
}

// refused checks that action fails with code and a message containing each of substrs.
func (g *storeGuest) refused(code rpc.Code, action string, params map[string]any, substrs ...string) {
	g.t.Helper()
	err := g.b.rpc.Call(g.ctx, action, params, nil)
	var re *rpc.Error
	if !errors.As(err, &re) || re.Code != code {
		g.t.Errorf("%s %v = %v; want code %s", action, params, err, code)
		return
	}
	for _, s := range substrs {
		if !strings.Contains(re.Message, s) {
			g.t.Errorf("%s %v = %v; want the message to name %q", action, params, err, s)
		}
	}
}

func ids(agent, session string, kv ...any) map[string]any {
	p := map[string]any{"agent_id": agent, "session_id": session}
	for i := 0; i+1 < len(kv); i += 2 {
		p[kv[i].(string)] = kv[i+1]
	}
	return p
}

// ran is a finished run with its output.
type ran struct {
	rpc.Run
	exit           int // -1 without an exit code
	stdout, stderr string
}

// run starts argv in agent/session with the extra params, waits for it and reads both streams.
func (g *storeGuest) run(agent, session string, extra map[string]any, argv ...string) ran {
	g.t.Helper()
	p := ids(agent, session, "argv", argv, "timeout", 600)
	for k, v := range extra {
		p[k] = v
	}
	var r rpc.Run
	g.must(rpc.ActionProcessStart, p, &r)
	g.must(rpc.ActionProcessWait, map[string]any{"run_id": r.RunID}, &r)
	res := ran{Run: r, exit: -1}
	if r.ExitCode != nil {
		res.exit = *r.ExitCode
	}
	var out, errOut rpc.Output
	g.must(rpc.ActionProcessOutput, map[string]any{"run_id": r.RunID, "stream": "stdout"}, &out)
	g.must(rpc.ActionProcessOutput, map[string]any{"run_id": r.RunID, "stream": "stderr"}, &errOut)
	res.stdout, res.stderr = out.Data, errOut.Data
	return res
}

func (g *storeGuest) sh(agent, session, script string) ran {
	g.t.Helper()
	return g.run(agent, session, nil, "/bin/sh", "-c", script)
}

// mustSh runs script and fails unless it exits 0.
func (g *storeGuest) mustSh(agent, session, script string) ran {
	g.t.Helper()
	r := g.sh(agent, session, script)
	if r.exit != 0 {
		g.t.Fatalf("%q in %s/%s: %s exit %d (%s); stderr %q", script, agent, session, r.State, r.exit, r.Reason, r.stderr)
	}
	return r
}

func (g *storeGuest) session(agent, session string) rpc.Session {
	g.t.Helper()
	var s rpc.Session
	g.must(rpc.ActionSessionGet, ids(agent, session), &s)
	return s
}

// spaceError says whether stderr shows the kernel refusing a write for space.
func spaceError(stderr string) bool {
	return strings.Contains(stderr, "Disk quota exceeded") || strings.Contains(stderr, "No space left on device")
}

const (
	tightQuota = 8 << 20  // the quota of the session that fills it
	keptQuota  = 16 << 20 // the quota that must survive a restart
	fenceWhy   = "guest12: evidence lost"
)

// TestStoreUnderPressureInGuest is issue 12's store under pressure on the booted appliance's real
// Btrfs store: a session at its quota and then the whole store full while another agent keeps
// working, deletes that give the space back, fences that stick, lossless and bounded run output,
// run records pruned at the default count, and a clean restart, with the store full again, on the
// same store disk: the daemon starts and keeps sessions, checkpoints, quotas, fences and the run
// records the policy allows, the other agent keeps working, and deletes give the space back.
func TestStoreUnderPressureInGuest(t *testing.T) {
	a := needAppliance(t, imageMode)
	ctx := testContext(t, 8*bootBudget)
	disk := blankDisk(t)
	b := a.boot(ctx, t, imageMode, disk)
	b.waitReady(ctx, t)
	g := &storeGuest{t: t, ctx: ctx, b: b}

	// "calm" is the agent that must keep working; "hog" fills its quota and then the store.
	for _, agent := range []string{"calm", "hog"} {
		g.must(rpc.ActionAgentCreate, map[string]any{"agent_id": agent}, nil)
	}
	g.must(rpc.ActionSessionCreate, ids("calm", "work"), nil)
	g.mustSh("calm", "work", "printf before > state.txt")
	g.must(rpc.ActionCheckpointCreate, ids("calm", "work", "checkpoint_id", "c0"), nil)
	g.must(rpc.ActionSessionCreate, ids("calm", "kept", "quota", keptQuota), nil)

	// calmWorks is the other agent's checkpoint, rollback and process.start, which must answer
	// whatever hog does.
	n := 0
	// With the store full, no agent's write can succeed (the agents' qgroup 3/1 is at its limit),
	// so then the run that changes state.txt is replaced by one that only reads.
	calmWorks := func(full bool) {
		g.t.Helper()
		n++
		g.must(rpc.ActionCheckpointCreate, ids("calm", "work", "checkpoint_id", fmt.Sprintf("during-%d", n)), nil)
		if full {
			g.mustSh("calm", "work", "cat state.txt >/dev/null")
		} else {
			g.mustSh("calm", "work", "printf after > state.txt")
		}
		g.must(rpc.ActionSessionRollback, ids("calm", "work", "checkpoint_id", "c0"), nil)
		if r := g.mustSh("calm", "work", "cat state.txt"); r.stdout != "before" {
			g.t.Errorf("state.txt after the rollback to c0 = %q, want %q", r.stdout, "before")
		}
	}

	// fillStore writes in agent/session (default quota: 8 GiB, more than the 1 GiB disk) until
	// the agents' qgroup 3/1 is at its limit, and checks that then calm cannot write either.
	fillStore := func(agent, session string) {
		g.t.Helper()
		r := g.sh(agent, session, "dd if=/dev/zero of=fill bs=1M count=4096 conv=fsync; rc=$?; sync; exit $rc")
		g.t.Logf("dd until the store is full: %s exit %d, stderr %q", r.State, r.exit, r.stderr)
		if r.exit == 0 || !spaceError(r.stderr) {
			g.t.Fatalf("dd of 4 GiB on a 1 GiB store: exit %d, stderr %q; want it refused for space", r.exit, r.stderr)
		}
		if w := g.sh("calm", "work", "dd if=/dev/zero of=big bs=1M count=128 conv=fsync; rc=$?; rm -f big; exit $rc"); w.exit == 0 {
			g.t.Errorf("calm wrote 128 MiB with the store full: the fill did not reach the agents' limit")
		}
	}
	// spaceIsBack waits until calm can write 128 MiB again, once Btrfs's cleaner has given back
	// what a delete freed.
	spaceIsBack := func() {
		g.t.Helper()
		for try := 1; ; try++ {
			w := g.sh("calm", "work", "dd if=/dev/zero of=big bs=1M count=128 conv=fsync; rc=$?; rm -f big; exit $rc")
			if w.exit == 0 {
				g.t.Logf("calm's 128 MiB write succeeded at try %d after the delete", try)
				return
			}
			if try == 30 {
				g.t.Fatalf("calm's 128 MiB write still fails after the full sessions were deleted: %q", w.stderr)
			}
			select {
			case <-ctx.Done():
				g.t.Fatal(ctx.Err())
			case <-time.After(2 * time.Second):
			}
		}
	}

	t.Run("quotas", func(t *testing.T) {
		g.t = t
		g.refused(rpc.CodeInvalidParams, rpc.ActionSessionCreate, ids("hog", "tiny", "quota", 4096), "quota")

		var s rpc.Session
		g.must(rpc.ActionSessionCreate, ids("hog", "tight", "quota", tightQuota), &s)
		if s.Quota == nil || s.Quota.Limit != tightQuota {
			t.Fatalf("session.create quota %d: quota %+v", tightQuota, s.Quota)
		}
		r := g.sh("hog", "tight", "dd if=/dev/zero of=fill bs=1M count=64 conv=fsync; rc=$?; sync; exit $rc")
		t.Logf("dd of 64 MiB at an 8 MiB quota: %s exit %d, stderr %q", r.State, r.exit, r.stderr)
		if r.exit == 0 || !spaceError(r.stderr) {
			t.Errorf("dd past the session's quota: exit %d, stderr %q; want it refused with EDQUOT or ENOSPC", r.exit, r.stderr)
		}
		s = g.session("hog", "tight")
		t.Logf("hog/tight quota after the fill: %+v", s.Quota)
		if s.Quota == nil || s.Quota.Limit != tightQuota || s.Quota.Used <= 0 || s.Quota.Qgroup == "" {
			t.Errorf("session.get quota = %+v; want the qgroup, limit %d and the usage", s.Quota, tightQuota)
		}
		calmWorks(false)

		// Now the whole store: checkpoint.create, checkpoint.delete, session.rollback and
		// process.start of the other agent still work, and deletes give the space back.
		g.must(rpc.ActionCheckpointCreate, ids("calm", "work", "checkpoint_id", "spare"), nil)
		g.must(rpc.ActionSessionCreate, ids("hog", "fill"), nil)
		fillStore("hog", "fill")
		calmWorks(true)
		g.must(rpc.ActionCheckpointDelete, ids("calm", "work", "checkpoint_id", "spare"), nil)
		g.must(rpc.ActionSessionDelete, ids("hog", "fill"), nil)
		g.must(rpc.ActionSessionDelete, ids("hog", "tight"), nil)
		spaceIsBack()
		calmWorks(false)
	})

	t.Run("fences stick", func(t *testing.T) {
		g.t = t
		for _, s := range []string{"fenced", "stuck"} {
			g.must(rpc.ActionSessionCreate, ids("calm", s), nil)
			g.must(rpc.ActionCheckpointCreate, ids("calm", s, "checkpoint_id", "c"), nil)
			g.must(rpc.ActionSessionFence, ids("calm", s, "reason", fenceWhy), nil)
		}
		if s := g.session("calm", "fenced"); s.Fenced == nil || s.Fenced.Reason != fenceWhy {
			t.Fatalf("session.get after session.fence: fenced %+v", s.Fenced)
		}
		g.refused(rpc.CodeConflict, rpc.ActionSessionDelete, ids("calm", "fenced"), fenceWhy)
		g.refused(rpc.CodeConflict, rpc.ActionCheckpointDelete, ids("calm", "fenced", "checkpoint_id", "c"), fenceWhy)
		g.refused(rpc.CodeConflict, rpc.ActionCheckpointCreate, ids("calm", "fenced", "checkpoint_id", "c2"), fenceWhy)
		g.refused(rpc.CodeConflict, rpc.ActionProcessStart, ids("calm", "fenced", "argv", []string{"/bin/true"}), fenceWhy)
		g.refused(rpc.CodeConflict, rpc.ActionSessionFence, ids("calm", "fenced", "reason", "all good"), fenceWhy)
		if err := b.rpc.Call(ctx, rpc.ActionSessionCreate, ids("calm", "fenced"), nil); err == nil {
			t.Errorf("session.create of the fenced session's id succeeded")
		}
		g.must(rpc.ActionCheckpointGet, ids("calm", "fenced", "checkpoint_id", "c"), nil)
		if s := g.session("calm", "fenced"); s.Fenced == nil || s.Fenced.Reason != fenceWhy {
			t.Errorf("the refused calls changed the fence: %+v", s.Fenced)
		}

		// The host lifts it: then the session may go, and one made again with its id is fresh.
		g.must(rpc.ActionSessionUnfence, ids("calm", "fenced"), nil)
		g.must(rpc.ActionSessionDelete, ids("calm", "fenced"), nil)
		var s rpc.Session
		g.must(rpc.ActionSessionCreate, ids("calm", "fenced"), &s)
		if s.Fenced != nil {
			t.Errorf("a session re-created after unfence and delete is fenced: %+v", s.Fenced)
		}
		g.mustSh("calm", "fenced", "true")
	})

	t.Run("run output", func(t *testing.T) {
		g.t = t
		g.must(rpc.ActionSessionCreate, ids("calm", "out"), nil)
		want := []byte("ok\xff\xfe\x00end\xc3")
		var r rpc.Run
		g.must(rpc.ActionProcessStart, ids("calm", "out", "argv", []string{"/bin/sh", "-c", `printf 'ok\377\376\000end\303'`}), &r)
		g.must(rpc.ActionProcessWait, map[string]any{"run_id": r.RunID}, &r)
		var out rpc.Output
		g.must(rpc.ActionProcessOutput, map[string]any{"run_id": r.RunID}, &out)
		got, err := base64.StdEncoding.DecodeString(out.Data)
		if out.Encoding != rpc.EncodingBase64 || err != nil || !bytes.Equal(got, want) {
			t.Errorf("process.output of invalid UTF-8 = %+v (decoded %q, %v); want base64 of %q", out, got, err, want)
		}
		if out.Truncated || out.DroppedBytes != 0 || !out.EOF {
			t.Errorf("a 9-byte output: truncated %v, dropped %d, eof %v", out.Truncated, out.DroppedBytes, out.EOF)
		}
		// A page cut inside a UTF-8 sequence is still lossless.
		g.must(rpc.ActionProcessOutput, map[string]any{"run_id": r.RunID, "offset": 6, "limit": 3, "encoding": "base64"}, &out)
		if got, _ := base64.StdEncoding.DecodeString(out.Data); !bytes.Equal(got, want[6:9]) || out.Next != 9 {
			t.Errorf("page [6,9) = %+v (decoded %q); want %q, next 9", out, got, want[6:9])
		}

		// Output beyond the 16 MiB bound per stream is dropped and counted.
		const bound, extra = 16 << 20, 1 << 20
		g.must(rpc.ActionProcessStart, ids("calm", "out", "argv", []string{"head", "-c", fmt.Sprint(bound + extra), "/dev/zero"}), &r)
		g.must(rpc.ActionProcessWait, map[string]any{"run_id": r.RunID}, &r)
		if r.StdoutDropped != extra {
			t.Errorf("process.wait stdout_dropped = %d, want %d", r.StdoutDropped, extra)
		}
		g.must(rpc.ActionProcessOutput, map[string]any{"run_id": r.RunID, "offset": bound - 4}, &out)
		if !out.Truncated || out.DroppedBytes != extra || out.Data != "\x00\x00\x00\x00" || !out.EOF {
			t.Errorf("the last page of the bounded stdout: truncated %v, dropped %d, data %q, eof %v; want truncated, %d dropped, 4 NULs, eof",
				out.Truncated, out.DroppedBytes, out.Data, out.EOF, extra)
		}
	})

	// The default retention keeps each session's newest 200 run records (--run-records-keep): the
	// 201st run of a session prunes its first, and no other session's.
	var kept []string
	t.Run("run records pruned", func(t *testing.T) {
		g.t = t
		const keep = 200
		var other rpc.Run
		g.must(rpc.ActionSessionCreate, ids("calm", "many"), nil)
		g.must(rpc.ActionSessionCreate, ids("calm", "few"), nil)
		g.must(rpc.ActionProcessStart, ids("calm", "few", "argv", []string{"/bin/true"}), &other)
		var runs []string
		for range keep + 1 {
			var r rpc.Run
			g.must(rpc.ActionProcessStart, ids("calm", "many", "argv", []string{"/bin/true"}), &r)
			g.must(rpc.ActionProcessWait, map[string]any{"run_id": r.RunID}, &r)
			runs = append(runs, r.RunID)
		}
		g.refused(rpc.CodeNotFound, rpc.ActionProcessGet, map[string]any{"run_id": runs[0]})
		kept = []string{runs[1], runs[keep], other.RunID}
		for _, id := range kept {
			g.must(rpc.ActionProcessGet, map[string]any{"run_id": id}, nil)
		}
	})

	// A clean power-off with the store full again, and a boot on the same store disk: it starts,
	// and keeps everything.
	g.t = t
	g.must(rpc.ActionAgentCreate, map[string]any{"agent_id": "filler"}, nil)
	g.must(rpc.ActionSessionCreate, ids("filler", "fill"), nil)
	fillStore("filler", "fill")
	b.powerOff(context.WithoutCancel(ctx), t)
	b = a.boot(ctx, t, imageMode, disk)
	b.waitReady(ctx, t)
	g.b = b

	t.Run("restart", func(t *testing.T) {
		g.t = t
		var info rpc.SystemInfo
		g.must(rpc.ActionSystemInfo, nil, &info)
		if len(info.Quarantined) != 0 {
			t.Errorf("quarantined after a clean restart: %+v", info.Quarantined)
		}
		var list []rpc.Checkpoint
		var res struct {
			Checkpoints []rpc.Checkpoint `json:"checkpoints"`
		}
		g.must(rpc.ActionCheckpointList, ids("calm", "work"), &res)
		list = res.Checkpoints
		names := map[string]bool{}
		for _, c := range list {
			names[c.CheckpointID] = true
		}
		for _, c := range []string{"c0", "during-1", "during-2", "during-3"} {
			if !names[c] {
				t.Errorf("checkpoint calm/work/%s is gone after the restart (have %v)", c, names)
			}
		}
		g.must(rpc.ActionSessionRollback, ids("calm", "work", "checkpoint_id", "c0"), nil)
		if r := g.mustSh("calm", "work", "cat state.txt"); r.stdout != "before" {
			t.Errorf("state.txt after the restart and a rollback to c0 = %q", r.stdout)
		}
		if s := g.session("calm", "kept"); s.Quota == nil || s.Quota.Limit != keptQuota {
			t.Errorf("calm/kept quota after the restart = %+v, want limit %d", s.Quota, keptQuota)
		}
		if s := g.session("calm", "stuck"); s.Fenced == nil || s.Fenced.Reason != fenceWhy {
			t.Errorf("calm/stuck after the restart: fenced %+v, want %q", s.Fenced, fenceWhy)
		}
		g.refused(rpc.CodeConflict, rpc.ActionSessionDelete, ids("calm", "stuck"), fenceWhy)
		g.refused(rpc.CodeConflict, rpc.ActionCheckpointDelete, ids("calm", "stuck", "checkpoint_id", "c"), fenceWhy)
		if s := g.session("calm", "fenced"); s.Fenced != nil {
			t.Errorf("the unfenced, re-created calm/fenced is fenced after the restart: %+v", s.Fenced)
		}
		for _, s := range []string{"tight", "fill"} {
			g.refused(rpc.CodeNotFound, rpc.ActionSessionGet, ids("hog", s))
		}
		// Pruning at start keeps what the policy allows.
		for _, id := range kept {
			g.must(rpc.ActionProcessGet, map[string]any{"run_id": id}, nil)
		}
		// The store is still full: the other agent works, and the deletes (agent.delete takes an
		// agent without sessions) give the space back.
		calmWorks(true)
		g.must(rpc.ActionSessionDelete, ids("filler", "fill"), nil)
		g.must(rpc.ActionAgentDelete, map[string]any{"agent_id": "filler"}, nil)
		spaceIsBack()
		// The kept quota is still enforced.
		r := g.sh("calm", "kept", "dd if=/dev/zero of=fill bs=1M count=64 conv=fsync")
		if r.exit == 0 || !spaceError(r.stderr) {
			t.Errorf("dd of 64 MiB at a 16 MiB quota after the restart: exit %d, stderr %q; want it refused for space", r.exit, r.stderr)
		}
	})
	g.t = t
	b.powerOff(context.WithoutCancel(ctx), t)
}
