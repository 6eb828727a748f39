package qemutests

import (
	"context"
	"strings"
	"testing"

	"github.com/allox-os/allox/internal/rpc"
)

// TestWorkspaceRollbackInGuest runs the seed's RPC sequence against the booted appliance through the
// token listener, and shows that a rollback restores what a tracked process changed while another
// session's files stay byte-identical.
func TestWorkspaceRollbackInGuest(t *testing.T) {
	a := needAppliance(t, imageMode)
	ctx := testContext(t, 2*bootBudget)
	b := a.boot(ctx, t, imageMode, blankDisk(t))
	b.waitReady(ctx, t)

	call := func(action string, params map[string]any) map[string]any {
		t.Helper()
		var res map[string]any
		if err := b.rpc.Call(ctx, action, params, &res); err != nil {
			t.Fatalf("%s %v: %v", action, params, err)
		}
		return res
	}
	// run starts argv in a session, waits for it and returns its stdout.
	run := func(session string, argv ...string) string {
		t.Helper()
		var r rpc.Run
		if err := b.rpc.Call(ctx, rpc.ActionProcessStart, map[string]any{"agent_id": "agent-a", "session_id": session, "argv": argv}, &r); err != nil {
			t.Fatalf("process.start %v: %v", argv, err)
		}
		if err := b.rpc.Call(ctx, rpc.ActionProcessWait, map[string]any{"run_id": r.RunID}, &r); err != nil {
			t.Fatal(err)
		}
		if r.ExitCode == nil || *r.ExitCode != 0 {
			t.Fatalf("%v in %s: %+v", argv, session, r)
		}
		var out rpc.Output
		if err := b.rpc.Call(ctx, rpc.ActionProcessOutput, map[string]any{"run_id": r.RunID}, &out); err != nil {
			t.Fatal(err)
		}
		return out.Data
	}

	call(rpc.ActionAgentCreate, map[string]any{"agent_id": "agent-a"})
	call(rpc.ActionSessionCreate, map[string]any{"agent_id": "agent-a", "session_id": "session-1"})
	call(rpc.ActionSessionCreate, map[string]any{"agent_id": "agent-a", "session_id": "session-2"})
	run("session-2", "/bin/sh", "-c", "head -c 65536 /dev/urandom > other.bin")
	otherSum := run("session-2", "sha256sum", "other.bin")
	call(rpc.ActionCheckpointCreate, map[string]any{"agent_id": "agent-a", "session_id": "session-1", "checkpoint_id": "clean"})

	// The seed's process.start example (without the observer's recovery block), then rollback.
	run("session-1", "/bin/sh", "-c", "printf changed > effect.txt")
	if got := run("session-1", "cat", "effect.txt"); got != "changed" {
		t.Fatalf("effect.txt = %q before rollback", got)
	}
	call(rpc.ActionSessionRollback, map[string]any{"agent_id": "agent-a", "session_id": "session-1", "checkpoint_id": "clean"})
	if got := run("session-1", "/bin/sh", "-c", "ls -A"); strings.Contains(got, "effect.txt") {
		t.Errorf("effect.txt survived the rollback: ls shows %q", got)
	}
	if got := run("session-2", "sha256sum", "other.bin"); got != otherSum {
		t.Errorf("session-2 changed across session-1's rollback: %q, was %q", got, otherSum)
	}
	b.powerOff(context.WithoutCancel(ctx), t)
}
