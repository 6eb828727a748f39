package qemutests

import (
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/allox-os/allox/internal/rpc"
)

// TestDaemonKilledDuringNestedDeleteInGuest is issue 12's SIGKILL-during-delete test on the guest:
// a session holding 120 nested Btrfs subvolumes (made by a managed, root run on the observer
// appliance) is deleted while a root process SIGKILLs the daemon a moment later. Init restarts the
// daemon; whenever the kill landed, the end state must be the same: the session gone (or deletable
// at once), not one of its subvolumes left, and every other session served. The test asserts
// that end state only, never a timing; it logs whether the kill landed inside the delete.
func TestDaemonKilledDuringNestedDeleteInGuest(t *testing.T) {
	a := needApplianceIn(t, imageMode, filepath.Join(outDir(), effectsOut))
	ctx := testContext(t, 3*bootBudget)
	b := a.boot(ctx, t, imageMode, blankDisk(t))
	b.waitReady(ctx, t)
	g := &storeGuest{t: t, ctx: ctx, b: b}
	managed := map[string]any{"managed": true}
	g.must(rpc.ActionAgentCreate, map[string]any{"agent_id": "agent-a"}, nil)
	for _, s := range []string{"victim", "killer", "calm"} {
		g.must(rpc.ActionSessionCreate, ids("agent-a", s, "turn_checkpoints", false), nil)
	}
	g.must(rpc.ActionCheckpointCreate, ids("agent-a", "calm", "checkpoint_id", "c"), nil)
	if r := g.run("agent-a", "victim", managed, "/bin/sh", "-c",
		`for i in $(seq 1 60); do btrfs subvolume create n$i >/dev/null && btrfs subvolume create n$i/m >/dev/null || exit 1; done`); r.exit != 0 {
		t.Fatalf("making the nested subvolumes: %+v, stderr %q", r.Run, r.stderr)
	}
	var info rpc.SystemInfo
	g.must(rpc.ActionSystemInfo, nil, &info)
	pid := info.Daemon.Pid
	if pid <= 1 {
		t.Fatalf("system.info reports daemon pid %d", pid)
	}

	// The killer waits until the delete has removed its first nested subvolume, then SIGKILLs the
	// daemon (its run's main process sleeps on meanwhile, so the run's end kills nothing first).
	victim := "/var/lib/allox/workspaces/agents/agent-a/workspace/sessions/victim/current"
	var killer rpc.Run
	g.must(rpc.ActionProcessStart, ids("agent-a", "killer", "managed", true, "argv", []string{"/bin/sh", "-c", fmt.Sprintf(
		`(while [ "$(ls -d %s/n*/m 2>/dev/null | wc -l)" -eq 60 ]; do :; done; kill -9 %d) & sleep 60`, victim, pid)}), &killer)
	delErr := b.rpc.Call(ctx, rpc.ActionSessionDelete, ids("agent-a", "victim"), nil)
	var rerr *rpc.Error
	switch {
	case delErr == nil:
		t.Logf("session.delete answered before the kill landed")
	case errors.As(delErr, &rerr):
		t.Fatalf("session.delete refused: %v", delErr)
	default:
		t.Logf("the kill landed inside session.delete: %v", delErr)
	}

	// Init restarts the daemon; wait for the new one.
	for {
		var now rpc.SystemInfo
		if err := b.rpc.Call(ctx, rpc.ActionSystemInfo, nil, &now); err == nil && now.Daemon.Pid != pid {
			t.Logf("daemon restarted: pid %d → %d; quarantined %v", pid, now.Daemon.Pid, now.Quarantined)
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the daemon (pid %d) was not killed and restarted: %v", pid, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}

	// Whatever the kill interrupted, the session is gone or can be deleted now, with every
	// nested subvolume.
	if err := b.rpc.Call(ctx, rpc.ActionSessionGet, ids("agent-a", "victim"), nil); err == nil {
		t.Logf("the restarted daemon still has the session: deleting it again")
		g.must(rpc.ActionSessionDelete, ids("agent-a", "victim"), nil)
	} else if !errors.As(err, &rerr) || rerr.Code != rpc.CodeNotFound {
		t.Fatalf("session.get of the deleted session after the restart: %v", err)
	}
	if r := g.run("agent-a", "calm", managed, "/bin/sh", "-c",
		"! btrfs subvolume list /var/lib/allox/workspaces | grep -F sessions/victim/ && test ! -e /var/lib/allox/workspaces/agents/agent-a/workspace/sessions/victim"); r.exit != 0 {
		t.Errorf("subvolumes of the deleted session are left: %+v\n%s%s", r.Run, r.stdout, r.stderr)
	}
	// Everything else is served.
	g.must(rpc.ActionCheckpointCreate, ids("agent-a", "calm", "checkpoint_id", "after-kill"), nil)
	g.must(rpc.ActionSessionRollback, ids("agent-a", "calm", "checkpoint_id", "c"), nil)
	b.powerOff(ctx, t)
}
