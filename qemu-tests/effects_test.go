package qemutests

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/allox-os/allox/internal/rpc"
)

// effectsOut is the subdirectory of outDir() that `make image` builds from
// testdata/system-effects.hcl: the appliance with the system-effects observer installed and
// enabled (--observer with the plugin's scope file) and managed execution allowed.
const effectsOut = "system-effects"

// effectsGuest drives one booted observer appliance; every case uses its own session, so a fence
// in one does not decide another.
type effectsGuest struct {
	t   *testing.T
	ctx context.Context
	b   *booted
	n   int
}

func (g *effectsGuest) call(action string, params map[string]any, res any) error {
	return g.b.rpc.Call(g.ctx, action, params, res)
}

func (g *effectsGuest) must(action string, params map[string]any, res any) {
	g.t.Helper()
	if err := g.call(action, params, res); err != nil {
		g.t.Fatalf("%s %v: %v", action, params, err)
	}
}

// session creates a fresh session of agent-a.
func (g *effectsGuest) session() string {
	g.t.Helper()
	g.n++
	id := fmt.Sprintf("session-%d", g.n)
	g.must(rpc.ActionSessionCreate, map[string]any{"agent_id": "agent-a", "session_id": id}, nil)
	return id
}

// run starts argv in session with the extra params, waits for it and returns the run with its effects.
func (g *effectsGuest) run(session string, extra map[string]any, argv ...string) rpc.Run {
	g.t.Helper()
	p := map[string]any{"agent_id": "agent-a", "session_id": session, "argv": argv}
	for k, v := range extra {
		p[k] = v
	}
	var r rpc.Run
	g.must(rpc.ActionProcessStart, p, &r)
	g.must(rpc.ActionProcessWait, map[string]any{"run_id": r.RunID}, &r)
	if r.Effects == nil {
		g.t.Fatalf("run %s ended without the observer's effects: %+v", r.RunID, r)
	}
	g.t.Logf("run %s %q: %+v", r.RunID, argv, *r.Effects)
	return r
}

// managed runs a shell command on the managed (unsandboxed) path, under protocol 2.
func (g *effectsGuest) managed(session, script string) rpc.Run {
	g.t.Helper()
	return g.run(session, map[string]any{"managed": true}, "/bin/sh", "-c", script)
}

// wantDomain checks an INCONSISTENT verdict that names domain.
func wantDomain(t *testing.T, r rpc.Run, domain string) {
	t.Helper()
	e := r.Effects
	if e.Verdict != rpc.VerdictInconsistent || e.Domains[domain] != rpc.VerdictInconsistent {
		t.Errorf("verdict %s, %s domain %q; want INCONSISTENT naming %s (domains %v)", e.Verdict, domain, e.Domains[domain], domain, e.Domains)
	}
	if e.Evidence != rpc.EvidenceComplete {
		t.Errorf("evidence %s, want COMPLETE: the run was fully observed", e.Evidence)
	}
}

// TestSystemEffectsInGuest boots the observer appliance and runs the seed's example under both
// protocols, agents that change each system domain, an observer killed mid-run and a tampered
// recover program.
func TestSystemEffectsInGuest(t *testing.T) {
	a := needApplianceIn(t, imageMode, filepath.Join(outDir(), effectsOut))
	ctx := testContext(t, 6*bootBudget)
	b := a.boot(ctx, t, imageMode, blankDisk(t))
	b.waitReady(ctx, t)
	g := &effectsGuest{t: t, ctx: ctx, b: b}
	g.must(rpc.ActionAgentCreate, map[string]any{"agent_id": "agent-a"}, nil)
	seed := []string{"/bin/sh", "-c", "printf changed > effect.txt"}

	t.Run("seed example, protocol 3", func(t *testing.T) {
		g.t = t
		s := g.session()
		r := g.run(s, map[string]any{"recovery": map[string]any{"scrub_runtime": true, "require_consistent": true}}, seed...)
		e := r.Effects
		if e.Protocol != 3 || e.Verdict != rpc.VerdictConsistent || e.Evidence != rpc.EvidenceComplete || e.Fenced {
			t.Fatalf("effects %+v, want protocol 3 CONSISTENT, COMPLETE, not fenced", *e)
		}
		if e.CheckpointID == "" || !strings.HasPrefix(e.EvidencePath, "/") {
			t.Errorf("effects %+v: want the pinned baseline and an absolute evidence path", *e)
		}
		var cp rpc.Checkpoint
		g.must(rpc.ActionCheckpointGet, map[string]any{"agent_id": "agent-a", "session_id": s, "checkpoint_id": e.CheckpointID}, &cp)
		if !cp.Pinned {
			t.Errorf("baseline %s is not pinned", e.CheckpointID)
		}
		// The recovery restored the workspace: effect.txt is gone.
		after := g.run(s, nil, "/bin/sh", "-c", "test ! -e effect.txt")
		if after.ExitCode == nil || *after.ExitCode != 0 {
			t.Errorf("effect.txt survived the recovery: %+v", after)
		}
	})

	t.Run("seed example, protocol 2", func(t *testing.T) {
		g.t = t
		s := g.session()
		r := g.run(s, nil, seed...)
		if e := r.Effects; e.Protocol != 2 || e.Verdict != rpc.VerdictConsistent || e.Evidence != rpc.EvidenceComplete || e.Fenced {
			t.Fatalf("effects %+v, want protocol 2 CONSISTENT (the workspace change is the run's effect), COMPLETE", *e)
		}
		kept := g.run(s, nil, "/bin/sh", "-c", "test \"$(cat effect.txt)\" = changed")
		if kept.ExitCode == nil || *kept.ExitCode != 0 {
			t.Errorf("protocol 2 must not restore anything, but effect.txt is not there: %+v", kept)
		}
	})

	t.Run("sysctl", func(t *testing.T) {
		g.t = t
		wantDomain(t, g.managed(g.session(), `v=$(cat /proc/sys/kernel/msgmax); echo $((v+1)) > /proc/sys/kernel/msgmax`), "sysctl")
	})
	t.Run("background process", func(t *testing.T) {
		g.t = t
		wantDomain(t, g.managed(g.session(), `setsid sleep 300 </dev/null >/dev/null 2>&1 & exit 0`), "processes")
	})
	t.Run("mount", func(t *testing.T) {
		g.t = t
		wantDomain(t, g.managed(g.session(), `mkdir -p /run/effects-test && mount -t tmpfs effects /run/effects-test`), "mounts")
	})
	t.Run("shared", func(t *testing.T) {
		g.t = t
		wantDomain(t, g.managed(g.session(), `echo residue > "$ALLOX_AGENT_SHARED/note.txt"`), "shared")
	})
	t.Run("a share write into another session is never the writer's change", func(t *testing.T) {
		g.t = t
		target, writer := g.session(), g.session()
		ok := func(what string, r rpc.Run) {
			t.Helper()
			if r.ExitCode == nil || *r.ExitCode != 0 || r.Effects.Verdict != rpc.VerdictConsistent || r.Effects.Evidence != rpc.EvidenceComplete {
				t.Fatalf("%s: exit %v, effects %+v; want exit 0, CONSISTENT, COMPLETE", what, r.ExitCode, *r.Effects)
			}
			for d, v := range r.Effects.Domains {
				if v != rpc.VerdictConsistent {
					t.Errorf("%s: domain %s %s, want every domain CONSISTENT", what, d, v)
				}
			}
		}
		ok("the target enables a writable share", g.run(target, nil, "/bin/sh", "-c",
			"mkdir -p output && /run/allox/bin/allox share enable --scope output --permission write"))
		// The writer's run writes into the target through the daemon: nothing changes in the
		// writer's own domains (its workspace, the agent's shared/), so its verdict has no change.
		ok("the writer's share write", g.run(writer, nil, "/bin/sh", "-c",
			"/run/allox/bin/allox share enable && printf 'from the writer' | /run/allox/bin/allox share write agent-a/"+target+" out.txt && test ! -e out.txt"))
		// The file is the target's, there before its next run: that run's own verdict is clean.
		ok("the target's next run reads it", g.run(target, nil, "/bin/sh", "-c", `test "$(cat output/out.txt)" = "from the writer"`))
	})

	t.Run("observer killed mid-run", func(t *testing.T) {
		g.t = t
		s := g.session()
		var r rpc.Run
		g.must(rpc.ActionProcessStart, map[string]any{"agent_id": "agent-a", "session_id": s, "argv": []string{"/bin/sleep", "120"}}, &r)
		g.must(rpc.ActionObserverAbort, map[string]any{"run_id": r.RunID}, nil)
		g.must(rpc.ActionProcessWait, map[string]any{"run_id": r.RunID}, &r)
		if r.State == "exited" || r.Effects == nil || !r.Effects.Fenced || r.Effects.Verdict == rpc.VerdictConsistent {
			t.Fatalf("run %+v effects %+v: want it killed, fenced, not CONSISTENT", r, r.Effects)
		}
		err := g.call(rpc.ActionProcessStart, map[string]any{"agent_id": "agent-a", "session_id": s, "argv": []string{"/bin/true"}}, nil)
		if err == nil || !strings.Contains(err.Error(), "observer") {
			t.Fatalf("process.start after the fault = %v, want a refusal naming the observer fault", err)
		}
		var sess rpc.Session
		g.must(rpc.ActionSessionGet, map[string]any{"agent_id": "agent-a", "session_id": s}, &sess)
		if sess.Fenced == nil || sess.Fenced.Evidence != r.Effects.EvidencePath {
			t.Errorf("session fence %+v, want the evidence path %s", sess.Fenced, r.Effects.EvidencePath)
		}
	})

	t.Run("tampered recover program", func(t *testing.T) {
		g.t = t
		// A managed agent (root in the VM) overmounts the pinned recover program...
		tamper := g.managed(g.session(), `p=/usr/libexec/allox/allox-system-effects-recover; `+
			`cp $p /run/evil && printf x >> /run/evil && mount --bind /run/evil $p`)
		wantDomain(t, tamper, "mounts")
		// ...and the next recovery refuses to run it and fences the session.
		r := g.run(g.session(), map[string]any{"recovery": map[string]any{"scrub_runtime": true}}, seed...)
		if e := r.Effects; !e.Fenced || e.Verdict == rpc.VerdictConsistent || !strings.Contains(e.Reason, "pin") {
			t.Fatalf("effects %+v: want fenced, not CONSISTENT, the reason naming the pin", *e)
		}
	})
	b.powerOff(ctx, t)
}
