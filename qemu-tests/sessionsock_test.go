package qemutests

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/allox-os/allox/internal/rpc"
)

// pythonOut is the subdirectory of outDir() that `make image` builds from testdata/python.hcl:
// the default appliance with python3-minimal, for the seed's python spellings of the client.
const pythonOut = "python"

// TestSessionClientInGuest boots the appliance with python3 and drives the session socket from
// inside runs, as an agent framework would: the client mkimage installed, bound at
// /run/allox/bin/allox, answers session.info with the run's own session, publishes turns (the
// turn's checkpoint appears on the control listener), refuses to address another session, and
// the python shims reach the same client, which says clearly that the plugins are not enabled.
func TestSessionClientInGuest(t *testing.T) {
	a := needApplianceIn(t, imageMode, filepath.Join(outDir(), pythonOut))
	ctx := testContext(t, 2*bootBudget)
	b := a.boot(ctx, t, imageMode, blankDisk(t))
	b.waitReady(ctx, t)
	g := &attacker{t: t, ctx: ctx, b: b, agent: "agent-a", session: "session-1"}
	g.must(t, rpc.ActionAgentCreate, map[string]any{"agent_id": "agent-a"}, nil)
	for _, s := range []string{"session-1", "session-2"} {
		// The turn policy is off by default: these sessions turn it on for the baseline and turn-1.
		g.must(t, rpc.ActionSessionCreate, map[string]any{"agent_id": "agent-a", "session_id": s, "turn_checkpoints": true}, nil)
	}
	run := func(t *testing.T, script string) (stdout, stderr string, exit int) {
		t.Helper()
		out, r := g.sh(t, script, nil)
		stdout, stderr, _ = strings.Cut(out, "--stderr--\n")
		exit = -1
		if r.ExitCode != nil {
			exit = *r.ExitCode
		}
		return stdout, stderr, exit
	}

	t.Run("allox session info", func(t *testing.T) {
		stdout, stderr, exit := run(t, "/run/allox/bin/allox session info")
		var info rpc.SessionInfo
		if exit != 0 || json.Unmarshal([]byte(stdout), &info) != nil {
			t.Fatalf("exit %d, stdout %q, stderr %q", exit, stdout, stderr)
		}
		if info.AgentID != "agent-a" || info.SessionID != "session-1" || info.Socket != "/run/allox/session.sock" ||
			info.Current != "/var/lib/allox/workspaces/agents/agent-a/workspace/sessions/session-1/current" {
			t.Errorf("session info = %+v, want agent-a/session-1 as its runs see it", info)
		}
	})

	t.Run("allox turn begin and end", func(t *testing.T) {
		if _, stderr, exit := run(t, "/run/allox/bin/allox turn begin 1 && /run/allox/bin/allox turn end 1"); exit != 0 {
			t.Fatalf("exit %d, stderr %q", exit, stderr)
		}
		var cp rpc.Checkpoint
		g.must(t, rpc.ActionCheckpointGet, map[string]any{"agent_id": "agent-a", "session_id": "session-1", "checkpoint_id": "turn-1"}, &cp)
		if cp.Parent != "baseline" {
			t.Errorf("turn-1 = %+v, want a checkpoint after the baseline", cp)
		}
	})

	t.Run("another session is refused", func(t *testing.T) {
		_, stderr, exit := run(t, `/run/allox/bin/allox call turn.end '{"session_id":"session-2","turn_id":"2","success":true}'`)
		if exit != 1 || !strings.Contains(stderr, "forbidden") || !strings.Contains(stderr, "field params.session_id") {
			t.Errorf("exit %d, stderr %q; want 1 and a refusal naming params.session_id", exit, stderr)
		}
		var list struct{ Checkpoints []rpc.Checkpoint }
		g.must(t, rpc.ActionCheckpointList, map[string]any{"agent_id": "agent-a", "session_id": "session-2"}, &list)
		if len(list.Checkpoints) != 1 {
			t.Errorf("session-2's checkpoints after the refusal: %+v, want its baseline alone", list.Checkpoints)
		}
	})

	t.Run("the python shims", func(t *testing.T) {
		for _, tt := range []struct{ script, want string }{
			{"python3 /run/allox/share.py status", "allox: share: the session share plugin is not enabled in this appliance: the workspace daemon enables it with --share-tools\n"},
			{"python3 /run/allox/network.py connect example 22", "allox: network: the session network plugin is not enabled in this appliance: the workspace daemon enables it with --session-network isolated|proxy\n"},
		} {
			if _, stderr, exit := run(t, tt.script); exit != 1 || stderr != tt.want {
				t.Errorf("%s: exit %d, stderr %q; want exit 1 and %q", tt.script, exit, stderr, tt.want)
			}
		}
	})
	b.powerOff(context.WithoutCancel(ctx), t)
}
