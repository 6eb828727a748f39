package probe

import (
	"context"
	"encoding/json"
	"sync"
	"testing"

	"github.com/allox-os/allox/deploy/probe/internal/spec"
	"github.com/allox-os/allox/deploy/probe/internal/wire"
)

// countingTasker records the task starts it is asked for (the Adapter Host's seam; the real
// one is in internal/agent and ../../agent_test.go).
type countingTasker struct {
	mu     sync.Mutex
	starts []TaskStart
}

func (c *countingTasker) StartTask(_ context.Context, t TaskStart) (json.RawMessage, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.starts = append(c.starts, t)
	return json.RawMessage(`{"intent":"` + t.IntentID + `"}`), nil
}

func (c *countingTasker) count() int { c.mu.Lock(); defer c.mu.Unlock(); return len(c.starts) }

// idleSandbox is a sandbox that is up and never ends.
type idleSandbox struct{}

func (idleSandbox) Endpoint() string           { return "http://127.0.0.1:1" }
func (idleSandbox) Token() string              { return "t" }
func (idleSandbox) Done() <-chan struct{}      { return nil }
func (idleSandbox) Stop(context.Context) error { return nil }

func taskProbe(t *testing.T) (*Probe, *countingTasker, *box) {
	tk := &countingTasker{}
	p := New(Config{Host: "h", Tasks: tk, Heal: HealPolicy{MaxAttempts: 2, Backoff: 1, MaxBackoff: 2}}, &fakeGateway{}, NewHostRuntime(nil))
	d := spec.DevBox{Name: "alpha", Agent: "main", Sessions: []spec.Session{{Name: "s1"}}}
	b := p.adopt(d, idleSandbox{}, NewBridge("http://127.0.0.1:1", "t"))
	b.phase = wire.PhaseRunning
	return p, tk, b
}

func taskIntent(id string, epoch int64) wire.Intent {
	return wire.Intent{ID: id, Epoch: epoch, Kind: wire.IntentTask, DevBox: "alpha", Session: "s1", TraceID: "t",
		Task: &wire.TaskSpec{CLI: "claude_code", Approval: wire.ApprovalDialog, PromptBytes: 5}}
}

// A task intent delivered again and again (the Gateway hands it out until it is reported done)
// starts its adapter once; each delivery is answered with the first start's outcome. The start
// gets the Probe's self-heal policy as its restart bounds.
func TestTaskIntentStartsOnce(t *testing.T) {
	p, tk, _ := taskProbe(t)
	hold(t, p)
	var wg sync.WaitGroup
	for range 5 {
		wg.Go(func() { p.Execute(t.Context(), taskIntent("task-1", 7)) })
	}
	wg.Wait()
	if n := tk.count(); n != 1 {
		t.Fatalf("the adapter was started %d times for one task intent, want 1", n)
	}
	if got := tk.starts[0]; got.Agent != "main" || got.Session != "s1" || got.Restart.MaxAttempts != 2 || got.Admit() != nil {
		t.Errorf("the start %+v: want main/s1 with the Probe's heal policy, admitted", got)
	}
	_, _, queued := p.events.Stats()
	if queued != 5 {
		t.Errorf("%d outcomes queued, want one per delivery (5)", queued)
	}
}

// Task intents of another epoch, or any while fenced, start nothing; an adapter's Admit says no
// once the Probe fenced the session.
func TestTaskIntentRefusedStaleOrFenced(t *testing.T) {
	p, tk, b := taskProbe(t)
	p.Execute(t.Context(), taskIntent("task-before-lease", 7))
	hold(t, p)
	p.Execute(t.Context(), taskIntent("task-old", 6))
	p.Execute(t.Context(), taskIntent("task-future", 8))
	if n := tk.count(); n != 0 {
		t.Fatalf("%d task intents of a stale epoch started an adapter", n)
	}
	p.Execute(t.Context(), taskIntent("task-ok", 7))
	if tk.count() != 1 {
		t.Fatal("the current epoch's task intent did not start")
	}
	admit := tk.starts[0].Admit
	b.mu.Lock()
	b.fenced = true
	b.mu.Unlock()
	p.Execute(t.Context(), taskIntent("task-fenced", 7))
	if n := tk.count(); n != 1 {
		t.Errorf("a task intent on a fenced devbox started an adapter (%d starts)", n)
	}
	if admit() == nil {
		t.Error("a running adapter's restart admitted on a fenced devbox")
	}
	if got := p.Status().Refused; got != 3 {
		t.Errorf("refused %d intents for their epoch, want 3", got)
	}
}
