package qemutests

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/allox-os/allox/internal/rpc"
)

// stateDir is the daemon's --state in the appliances (its default, ROOT/.allox-state).
const stateDir = "/var/lib/allox/workspaces/.allox-state"

// plantedRollback is what a daemon killed in the middle of a rollback of agent-a/hostile leaves in
// its journal, with current/ no longer either copy the journal knows (as in
// services/workspace-daemon/quarantine_test.go).
const plantedRollback = `{"id":"1-1","op":"rollback","agent_id":"agent-a","session_id":"hostile","checkpoint_id":"c",` +
	`"step":"rollback.exchange","tmp":".rollback-1-1","old_id":1,"new_id":2}`

// TestQuarantineInGuest is issue 12's hostile tree and quarantine path on the booted observer
// appliance (managed runs allowed, so a run is root): a run's nested Btrfs subvolume makes
// checkpoint.create refuse naming its path and goes with session.delete; then a managed run plants
// an unfinishable rollback in the daemon's journal, and after a clean restart on the same store disk
// that session alone is quarantined (system.info, session.get, code quarantined), everything else
// is served, and session.delete recovers it.
func TestQuarantineInGuest(t *testing.T) {
	a := needApplianceIn(t, imageMode, filepath.Join(outDir(), effectsOut))
	ctx := testContext(t, 4*bootBudget)
	disk := blankDisk(t)
	b := a.boot(ctx, t, imageMode, disk)
	b.waitReady(ctx, t)
	g := &storeGuest{t: t, ctx: ctx, b: b}
	managed := map[string]any{"managed": true}
	root := func(session, script string) ran {
		g.t.Helper()
		r := g.run("agent-a", session, managed, "/bin/sh", "-c", script)
		if r.exit != 0 {
			g.t.Fatalf("managed %q in %s: %s exit %d (%s); stderr %q", script, session, r.State, r.exit, r.Reason, r.stderr)
		}
		return r
	}
	g.must(rpc.ActionAgentCreate, map[string]any{"agent_id": "agent-a"}, nil)
	for _, s := range []string{"nested", "hostile", "calm", "planter"} {
		g.must(rpc.ActionSessionCreate, ids("agent-a", s, "turn_checkpoints", false), nil)
	}
	for _, s := range []string{"calm", "hostile"} {
		g.must(rpc.ActionCheckpointCreate, ids("agent-a", s, "checkpoint_id", "c"), nil)
	}

	t.Run("nested subvolume", func(t *testing.T) {
		g.t = t
		r := root("nested", "btrfs subvolume create nested && printf x > nested/f")
		if r.Effects != nil && r.Effects.Fenced {
			t.Fatalf("the observer fenced the session for a workspace change: %+v", *r.Effects)
		}
		g.refused(rpc.CodeConflict, rpc.ActionCheckpointCreate, ids("agent-a", "nested", "checkpoint_id", "c"),
			"current/nested is a nested Btrfs subvolume")
		g.refused(rpc.CodeNotFound, rpc.ActionCheckpointGet, ids("agent-a", "nested", "checkpoint_id", "c"))
		dir := filepath.Dir(g.session("agent-a", "nested").Current)
		g.must(rpc.ActionSessionDelete, ids("agent-a", "nested"), nil)
		g.refused(rpc.CodeNotFound, rpc.ActionSessionGet, ids("agent-a", "nested"))
		root("planter", "test ! -e '"+dir+"' && ! btrfs subvolume list /var/lib/allox/workspaces | grep -F sessions/nested/")
		// The daemon keeps serving every other session.
		g.must(rpc.ActionCheckpointCreate, ids("agent-a", "calm", "checkpoint_id", "c-after-delete"), nil)
		g.must(rpc.ActionSessionRollback, ids("agent-a", "calm", "checkpoint_id", "c"), nil)
	})

	// The quarantine needs a second boot, which belongs to the test (a subtest would kill it).
	g.t = t
	root("hostile", "btrfs subvolume create nested")
	root("planter", "printf '%s' '"+plantedRollback+"' > "+stateDir+"/journal/1-1.json")
	b.powerOff(context.WithoutCancel(ctx), t)
	b = a.boot(ctx, t, imageMode, disk)
	b.waitReady(ctx, t)
	g.b = b

	t.Run("quarantine after restart", func(t *testing.T) {
		g.t = t

		var info rpc.SystemInfo
		g.must(rpc.ActionSystemInfo, nil, &info)
		if len(info.Quarantined) != 1 || info.Quarantined[0].AgentID != "agent-a" || info.Quarantined[0].SessionID != "hostile" || info.Quarantined[0].Reason == "" {
			t.Fatalf("system.info quarantined = %+v; want agent-a/hostile with its reason", info.Quarantined)
		}
		t.Logf("quarantined: %+v", info.Quarantined[0])
		s := g.session("agent-a", "hostile")
		if s.Quarantine == nil || s.Quarantine.Since.IsZero() || s.Quarantine.Reason != info.Quarantined[0].Reason {
			t.Errorf("session.get quarantine = %+v; want the reason and since system.info shows", s.Quarantine)
		}
		for action, p := range map[string]map[string]any{
			rpc.ActionProcessStart:     ids("agent-a", "hostile", "argv", []string{"/bin/true"}),
			rpc.ActionCheckpointCreate: ids("agent-a", "hostile", "checkpoint_id", "c2"),
			rpc.ActionSessionRollback:  ids("agent-a", "hostile", "checkpoint_id", "c"),
		} {
			g.refused(rpc.CodeQuarantined, action, p, "session.delete")
		}
		// Everything else is served.
		g.must(rpc.ActionSessionRollback, ids("agent-a", "calm", "checkpoint_id", "c"), nil)
		if r := g.sh("agent-a", "calm", "true"); r.exit != 0 {
			t.Errorf("a run in another session after the quarantine: %+v", r)
		}
		dir := filepath.Dir(s.Current)
		g.must(rpc.ActionSessionDelete, ids("agent-a", "hostile"), nil)
		g.must(rpc.ActionSystemInfo, nil, &info)
		if len(info.Quarantined) != 0 {
			t.Errorf("quarantined after session.delete: %+v", info.Quarantined)
		}
		g.refused(rpc.CodeNotFound, rpc.ActionSessionGet, ids("agent-a", "hostile"))
		if r := g.run("agent-a", "planter", managed, "/bin/sh", "-c", "test ! -e '"+dir+"'"); r.exit != 0 {
			t.Errorf("the deleted quarantined session's directory %s (with its nested subvolume) is left", dir)
		}
		if !strings.HasPrefix(dir, "/var/lib/allox/workspaces/") {
			t.Errorf("session directory %q is not in the store", dir)
		}
	})
	g.t = t
	b.powerOff(context.WithoutCancel(ctx), t)
}
