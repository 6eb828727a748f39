package probe

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/allox-os/allox/deploy/probe/internal/lease"
	"github.com/allox-os/allox/deploy/probe/internal/spec"
	"github.com/allox-os/allox/deploy/probe/internal/wire"
)

// fakeGateway grants epoch 7 and records reports; it is for the Probe's logic only (the real
// Gateway and appliance are in ../../chaos_test.go).
type fakeGateway struct {
	mu          sync.Mutex
	events      []wire.Event
	partitioned bool
}

func (g *fakeGateway) grant() (lease.Grant, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.partitioned {
		return lease.Grant{}, errors.New("unreachable")
	}
	return lease.Grant{Epoch: 7, RenewEvery: 20 * time.Millisecond, StopAfter: 200 * time.Millisecond, LostAfter: 300 * time.Millisecond}, nil
}
func (g *fakeGateway) Register(context.Context, wire.Register) (lease.Grant, error) {
	return g.grant()
}
func (g *fakeGateway) Heartbeat(context.Context, wire.Heartbeat) (lease.Grant, error) {
	return g.grant()
}
func (g *fakeGateway) Pull(ctx context.Context, _, _ int64, _ time.Duration) (wire.Intents, error) {
	<-ctx.Done()
	return wire.Intents{}, ctx.Err()
}
func (g *fakeGateway) Report(_ context.Context, _ int64, evs []wire.Event) error {
	g.mu.Lock()
	g.events = append(g.events, evs...)
	g.mu.Unlock()
	return nil
}

// countingAppliance answers every action with success and counts checkpoint.create calls.
func countingAppliance(t *testing.T, calls *int, mu *sync.Mutex) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Action string          `json:"action"`
			Params json.RawMessage `json:"params"`
		}
		json.NewDecoder(r.Body).Decode(&req)
		if req.Action == "checkpoint.create" {
			mu.Lock()
			*calls++
			mu.Unlock()
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"ok":true,"result":{"checkpoint_id":"c1"}}`))
	}))
	t.Cleanup(srv.Close)
	return srv
}

func newTestProbe(t *testing.T, endpoint string) (*Probe, *fakeGateway) {
	gw := &fakeGateway{}
	p := New(Config{Host: "h"}, gw, NewHostRuntime(nil))
	d := spec.DevBox{Name: "alpha", Agent: "main", Sessions: []spec.Session{{Name: "s1"}}}
	p.adopt(d, nil, NewBridge(endpoint, "t"))
	return p, gw
}

// hold runs the Lease Guard until the test ends and waits until it holds the lease.
func hold(t *testing.T, p *Probe) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); p.guard.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	for p.Epoch() == 0 {
		<-p.guard.Changed()
	}
}

func checkpointIntent(id string, epoch int64) wire.Intent {
	return wire.Intent{ID: id, Epoch: epoch, Kind: wire.IntentCheckpoint, DevBox: "alpha", Session: "s1", TraceID: "t"}
}

// Duplicates of one intent (the Gateway hands out pending intents until they are reported done)
// run once; each is reported with the first run's result.
func TestExecuteDuplicateIntentsRunOnce(t *testing.T) {
	var calls int
	var mu sync.Mutex
	srv := countingAppliance(t, &calls, &mu)
	p, _ := newTestProbe(t, srv.URL)
	hold(t, p)
	ctx := t.Context()
	var wg sync.WaitGroup
	for range 5 {
		wg.Go(func() { p.Execute(ctx, checkpointIntent("op-1", 7)) })
	}
	wg.Wait()
	if calls != 1 {
		t.Errorf("checkpoint.create ran %d times for one intent id, want 1", calls)
	}
	_, _, queued := p.events.Stats()
	if queued != 5 {
		t.Errorf("%d outcomes queued, want one per delivery (5)", queued)
	}
}

// Intents of another epoch, and any intent while fenced, never reach the appliance.
func TestExecuteRefusesStaleEpochAndFenced(t *testing.T) {
	var calls int
	var mu sync.Mutex
	srv := countingAppliance(t, &calls, &mu)
	p, gw := newTestProbe(t, srv.URL)
	p.Execute(t.Context(), checkpointIntent("op-before-lease", 7)) // fenced: no lease yet
	hold(t, p)
	p.Execute(t.Context(), checkpointIntent("op-old", 6))
	p.Execute(t.Context(), checkpointIntent("op-future", 8))
	gw.mu.Lock()
	gw.partitioned = true
	gw.mu.Unlock()
	for p.Epoch() != 0 { // stop_after passes without a renewal
		<-p.guard.Changed()
	}
	p.Execute(t.Context(), checkpointIntent("op-after-stop", 7))
	mu.Lock()
	defer mu.Unlock()
	if calls != 0 {
		t.Errorf("%d intents reached the appliance, want none", calls)
	}
	if got := p.Status().Refused; got != 4 {
		t.Errorf("refused %d intents, want 4", got)
	}
}

// blockingRuntime boots only when released.
type blockingRuntime struct{ release chan struct{} }

func (r blockingRuntime) Boot(ctx context.Context, d spec.DevBox) (Sandbox, error) {
	select {
	case <-r.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return nil, errors.New("released")
}

// A boot in progress (minutes under TCG) holds neither the heartbeat's capacity count nor another
// DevBox's boot: it once held the Host Runtime Manager's one lock, so a slow boot starved the
// lease renewal past stop_after and the Probe fenced itself.
func TestHostRuntimeBootDoesNotBlockOthers(t *testing.T) {
	rt := blockingRuntime{release: make(chan struct{})}
	h := NewHostRuntime(map[string]Runtime{spec.RuntimeProcess: rt})
	go h.Ensure(t.Context(), spec.DevBox{Name: "slow", Runtime: spec.RuntimeProcess})
	counted := make(chan struct{})
	go func() {
		for h.Count() != 1 { // returns while the boot is held: counted as a slot in use
			time.Sleep(time.Millisecond)
		}
		close(counted)
	}()
	select {
	case <-counted:
	case <-time.After(10 * time.Second):
		t.Fatal("Count did not return 1 while a sandbox booted (blocked, or the boot not counted)")
	}
	done := make(chan error, 1)
	go func() {
		_, err := h.Ensure(t.Context(), spec.DevBox{Name: "other", Runtime: spec.RuntimeQEMU})
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, ErrNoRuntime) {
			t.Errorf("other devbox: %v, want ErrNoRuntime", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("another DevBox's Ensure waited for a boot in progress")
	}
	close(rt.release)
}
