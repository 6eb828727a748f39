package gateway

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/allox-os/allox/deploy/probe/internal/lease"
	"github.com/allox-os/allox/deploy/probe/internal/spec"
	"github.com/allox-os/allox/deploy/probe/internal/wire"
)

func register(t *testing.T, p *wire.ProbeClient, slots int) lease.Grant {
	t.Helper()
	g, err := p.Register(t.Context(), wire.Register{Host: p.Host, Capacity: wire.Capacity{Slots: slots}})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Validate(); err != nil {
		t.Fatal(err)
	}
	return g
}

// keepAlive heartbeats until the returned stop is called.
func keepAlive(t *testing.T, p *wire.ProbeClient, g lease.Grant) (stop func()) {
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tk := time.NewTicker(g.RenewEvery)
		defer tk.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tk.C:
				p.Heartbeat(ctx, wire.Heartbeat{Host: p.Host, Epoch: g.Epoch, Capacity: wire.Capacity{Slots: 4}, Healthy: true})
			}
		}
	}()
	var once bool
	stop = func() {
		if !once {
			once = true
			cancel()
			<-done
		}
	}
	t.Cleanup(stop)
	return stop
}

func apply(t *testing.T, a *wire.AdminClient, boxes ...spec.DevBox) {
	t.Helper()
	for i := range boxes {
		if err := spec.Check(&boxes[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Do(t.Context(), http.MethodPost, wire.PathApply, wire.Apply{DevBoxes: boxes, Reason: "test"}, nil); err != nil {
		t.Fatal(err)
	}
}

func get(t *testing.T, a *wire.AdminClient, name string) wire.DevBoxStatus {
	t.Helper()
	var st wire.DevBoxStatus
	if err := a.Do(t.Context(), http.MethodGet, wire.PathDevBoxes+"/"+name, nil, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

func TestRegisterGivesNewEpochEachTime(t *testing.T) {
	c := newCluster(t, 1)
	p := c.probe("host-a")
	g1 := register(t, p, 1)
	g2 := register(t, p, 1)
	if g2.Epoch <= g1.Epoch {
		t.Fatalf("second registration epoch %d, want > %d", g2.Epoch, g1.Epoch)
	}
	if _, err := p.Heartbeat(t.Context(), wire.Heartbeat{Host: "host-a", Epoch: g1.Epoch}); !errors.Is(err, lease.ErrLost) {
		t.Errorf("heartbeat of the replaced epoch = %v, want lease lost", err)
	}
	if _, err := p.Heartbeat(t.Context(), wire.Heartbeat{Host: "host-a", Epoch: g2.Epoch, Healthy: true}); err != nil {
		t.Errorf("heartbeat of the current epoch: %v", err)
	}
	if _, err := p.Pull(t.Context(), g1.Epoch, 0, 0); !errors.Is(err, lease.ErrLost) {
		t.Errorf("pull under the replaced epoch = %v, want lease lost", err)
	}
}

func TestPlaceDeliverComplete(t *testing.T) {
	c := newCluster(t, 1)
	c.lead(0)
	a := c.admin()
	small, big := c.probe("host-small"), c.probe("host-big")
	gs, gb := register(t, small, 1), register(t, big, 3)
	keepAlive(t, small, gs)
	keepAlive(t, big, gb)
	apply(t, a, spec.DevBox{Name: "alpha", Runtime: "process", Sessions: []spec.Session{{Name: "s1"}}})
	var st wire.DevBoxStatus
	c.eventually("alpha placed", func() bool { st = get(t, a, "alpha"); return st.Placement != nil })
	if st.Placement.Host != "host-big" || st.Placement.Epoch != gb.Epoch {
		t.Fatalf("placement %+v, want host-big (most free slots) under epoch %d", st.Placement, gb.Epoch)
	}
	in, err := big.Pull(t.Context(), gb.Epoch, 0, 5*time.Second)
	if err != nil || len(in.Intents) != 1 {
		t.Fatalf("pull = %+v, %v; want one intent", in, err)
	}
	it := in.Intents[0]
	if it.Kind != wire.IntentBoot || it.Epoch != gb.Epoch || it.Spec == nil || it.Spec.Name != "alpha" || len(it.TraceID) != 32 {
		t.Fatalf("intent %+v: want boot of alpha under epoch %d with a trace id", it, gb.Epoch)
	}
	if in, _ := small.Pull(t.Context(), gs.Epoch, 0, 0); len(in.Intents) != 0 {
		t.Errorf("host-small got %v: intents of another host", in.Intents)
	}
	err = big.Report(t.Context(), gb.Epoch, []wire.Event{
		{Kind: wire.EventPhase, Epoch: gb.Epoch, DevBox: "alpha", Phase: wire.PhaseRunning, TraceID: it.TraceID},
		{Kind: wire.EventPhase, Epoch: gb.Epoch, DevBox: "alpha", Session: "s1", Phase: wire.PhaseRunning, TraceID: it.TraceID},
		{Kind: wire.EventIntentDone, Epoch: gb.Epoch, IntentID: it.ID, TraceID: it.TraceID},
	})
	if err != nil {
		t.Fatal(err)
	}
	st = get(t, a, "alpha")
	if st.Observed == nil || st.Observed.Phase != wire.PhaseRunning || st.Observed.Sessions["s1"] != wire.PhaseRunning {
		t.Errorf("observed %+v, want running with s1 running", st.Observed)
	}
	if in, _ := big.Pull(t.Context(), gb.Epoch, 0, 0); len(in.Intents) != 0 {
		t.Errorf("a done intent is still pending: %+v", in.Intents)
	}
	// Repeated passes (the loop keeps running) issue nothing new: the intent id is stable.
	time.Sleep(5 * testConfig.ReconcileEvery)
	if in, _ := big.Pull(t.Context(), gb.Epoch, 0, 0); len(in.Intents) != 0 {
		t.Errorf("reconcile re-issued a completed intent: %+v", in.Intents)
	}
}

// A host that stops renewing keeps its placement until lost_after has passed since its last
// renewal: the Gateway never reassigns before the Probe had to fence (stop_after).
func TestReassignOnlyAfterLostAfter(t *testing.T) {
	c := newCluster(t, 1)
	c.lead(0)
	a := c.admin()
	pa, pb := c.probe("host-a"), c.probe("host-b")
	ga := register(t, pa, 2)
	stopA := keepAlive(t, pa, ga)
	apply(t, a, spec.DevBox{Name: "alpha", Runtime: "process"})
	c.eventually("alpha on host-a", func() bool { st := get(t, a, "alpha"); return st.Placement != nil && st.Placement.Host == "host-a" })
	gb := register(t, pb, 1)
	keepAlive(t, pb, gb)
	stopA()
	lastRenew := time.Now() // at most RenewEvery later than the real last renewal
	var st wire.DevBoxStatus
	c.eventually("alpha moved to host-b", func() bool { st = get(t, a, "alpha"); return st.Placement.Host == "host-b" })
	if moved := time.Since(lastRenew); moved < testConfig.LostAfter-testConfig.RenewEvery {
		t.Errorf("reassigned %v after host-a's last renewal, before lost_after %v", moved, testConfig.LostAfter)
	}
	if st.Placement.Epoch != gb.Epoch {
		t.Errorf("placement epoch %d, want host-b's %d", st.Placement.Epoch, gb.Epoch)
	}
	// host-a's old epoch can neither pull nor report.
	if _, err := pa.Pull(t.Context(), ga.Epoch, 0, 0); !errors.Is(err, lease.ErrLost) {
		t.Errorf("pull by the lost host = %v, want lease lost", err)
	}
	err := pa.Report(t.Context(), ga.Epoch, []wire.Event{{Kind: wire.EventPhase, Epoch: ga.Epoch, DevBox: "alpha", Phase: wire.PhaseRunning}})
	if !errors.Is(err, lease.ErrLost) {
		t.Errorf("report by the lost host = %v, want lease lost", err)
	}
}

// A restarted Probe registers again: its placements are re-issued under the new epoch and the old
// epoch's intents are never handed out.
func TestReRegisterReissuesUnderNewEpoch(t *testing.T) {
	c := newCluster(t, 1)
	c.lead(0)
	a := c.admin()
	p := c.probe("host-a")
	g1 := register(t, p, 2)
	stop := keepAlive(t, p, g1)
	apply(t, a, spec.DevBox{Name: "alpha", Runtime: "process"})
	c.eventually("placed", func() bool { return get(t, a, "alpha").Placement != nil })
	stop()
	g2 := register(t, p, 2)
	keepAlive(t, p, g2)
	c.eventually("re-stamped", func() bool { return get(t, a, "alpha").Placement.Epoch == g2.Epoch })
	in, err := p.Pull(t.Context(), g2.Epoch, 0, 5*time.Second)
	if err != nil || len(in.Intents) != 1 || in.Intents[0].Epoch != g2.Epoch {
		t.Fatalf("pull under the new epoch = %+v, %v; want one boot intent of epoch %d", in, err, g2.Epoch)
	}
	resp, err := c.cli.Get(t.Context(), intentPrefix("host-a"), withPrefix())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range resp.Kvs {
		if strings.Contains(string(kv.Value), `"epoch":`+itoa(g1.Epoch)) {
			t.Errorf("an intent of the old epoch is still stored: %s", kv.Value)
		}
	}
}

func TestOnlyTheLeaderReconciles(t *testing.T) {
	c := newCluster(t, 2)
	c.lead(0)
	c.waitLeader(0)
	c.lead(1)
	if err := c.gws[1].Reconcile(t.Context()); !errors.Is(err, ErrDenied) {
		t.Errorf("a follower's Reconcile = %v, want denied", err)
	}
	// A write fenced by a leader key that is no longer current fails: a deposed leader cannot
	// place anything.
	c.gws[0].leader.set(prefixLeader+"/stale", 1)
	stale, _ := c.gws[0].leader.cmp()
	if _, err := c.gws[0].commit(t.Context(), []clientv3Cmp{stale}, putJSON(prefixPlacement+"x", map[string]int{})); !errors.Is(err, ErrConflict) {
		t.Errorf("a write under a stale leader key = %v, want conflict", err)
	}
}

func TestOpPolicy(t *testing.T) {
	c := newCluster(t, 1)
	c.lead(0)
	a := c.admin()
	p := c.probe("host-a")
	keepAlive(t, p, register(t, p, 1))
	apply(t, a, spec.DevBox{Name: "alpha", Runtime: "process", Sessions: []spec.Session{{Name: "s1"}}})
	c.eventually("placed", func() bool { return get(t, a, "alpha").Placement != nil })
	for _, tc := range []struct {
		name string
		op   wire.Op
		code string
	}{
		{"rollback without approval", wire.Op{DevBox: "alpha", Kind: wire.IntentRollback, Session: "s1", Checkpoint: "c1"}, "forbidden"},
		{"rollback without checkpoint", wire.Op{DevBox: "alpha", Kind: wire.IntentRollback, Session: "s1", Approval: "CHG-1"}, "invalid"},
		{"unknown session", wire.Op{DevBox: "alpha", Kind: wire.IntentCheckpoint, Session: "nope"}, "invalid"},
		{"unknown kind", wire.Op{DevBox: "alpha", Kind: "migrate"}, "invalid"},
		{"unknown devbox", wire.Op{DevBox: "beta", Kind: wire.IntentCheckpoint, Session: "s1"}, "not_found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := a.Do(t.Context(), http.MethodPost, wire.PathOps, tc.op, nil)
			var ref *wire.ErrRefused
			if !errors.As(err, &ref) || ref.Body.Code != tc.code {
				t.Errorf("op = %v, want refused with %s", err, tc.code)
			}
		})
	}
	var out map[string]string
	if err := a.Do(t.Context(), http.MethodPost, wire.PathOps, wire.Op{DevBox: "alpha", Kind: wire.IntentRollback, Session: "s1", Checkpoint: "c1", Approval: "CHG-7", Reason: "bad edit"}, &out); err != nil {
		t.Fatal(err)
	}
	recs, err := c.gws[0].Audit(t.Context(), "", 1000)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, r := range recs {
		if r.Action == wire.IntentRollback && r.Approval == "CHG-7" && r.Reason == "bad edit" && r.Object == "session/alpha/s1" && len(r.TraceID) == 32 {
			found = true
		}
	}
	if !found {
		t.Errorf("no audit record of the rollback with its approval, reason and trace: %+v", recs)
	}
}

func TestApplyRefusesBadSpecsAndChangesNothing(t *testing.T) {
	c := newCluster(t, 1)
	a := c.admin()
	for _, tc := range []struct {
		name  string
		boxes []spec.DevBox
		want  string
	}{
		{"bad runtime", []spec.DevBox{{Name: "ok"}, {Name: "b", Runtime: "docker"}}, `devboxes.1: Invalid runtime`},
		{"bad name", []spec.DevBox{{Name: "../x"}}, "Invalid devbox name"},
		{"duplicate", []spec.DevBox{{Name: "d"}, {Name: "d"}}, `"d" is given twice`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := a.Do(t.Context(), http.MethodPost, wire.PathApply, wire.Apply{DevBoxes: tc.boxes}, nil)
			var ref *wire.ErrRefused
			if !errors.As(err, &ref) || ref.Status != 400 || !strings.Contains(ref.Body.Message, tc.want) {
				t.Errorf("apply = %v, want 400 containing %q", err, tc.want)
			}
			var l []wire.DevBoxStatus
			if err := a.Do(t.Context(), http.MethodGet, wire.PathDevBoxes, nil, &l); err != nil || len(l) != 0 {
				t.Errorf("after a refused apply the store holds %v (%v), want nothing", l, err)
			}
		})
	}
	err := a.Do(t.Context(), http.MethodPost, wire.PathApply, map[string]any{"devboxes": []any{}, "force": true}, nil)
	if !strings.Contains(errString(err), `unknown field "force"`) {
		t.Errorf("unknown key in the body = %v, want it named", err)
	}
}

func TestAuditPages(t *testing.T) {
	c := newCluster(t, 1)
	a := c.admin()
	for _, n := range []string{"a1", "a2", "a3", "a4", "a5"} {
		apply(t, a, spec.DevBox{Name: n})
	}
	var all []string
	after := ""
	for {
		var page []struct{ Key, Object, Action string }
		if err := a.Do(t.Context(), http.MethodGet, wire.PathAudit+"?limit=2&after="+after, nil, &page); err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		for _, r := range page {
			all = append(all, r.Action+" "+r.Object)
		}
		after = page[len(page)-1].Key
	}
	want := "apply devbox/a1,apply devbox/a2,apply devbox/a3,apply devbox/a4,apply devbox/a5"
	if got := strings.Join(all, ","); got != want {
		t.Errorf("audit pages = %s, want %s", got, want)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
