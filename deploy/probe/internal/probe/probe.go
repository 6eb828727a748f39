// Package probe is the host-side data plane: it holds the host's lease (Lease Guard), pulls and
// executes the Gateway's intents under that lease's epoch, runs the host's Worker Sandboxes (Host
// Runtime Manager), drives each appliance over its host listener (Workspace Bridge), supervises
// sessions (Session Supervisor), heals a bounded set of local faults (Local Self-Heal Executor),
// and reports health, capabilities and events. It owns no placement, policy or desired state: it
// has no call that could change them.
package probe

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/allox-os/allox/deploy/probe/internal/lease"
	"github.com/allox-os/allox/deploy/probe/internal/wire"
)

// Gateway is what the Probe needs of the control plane; *wire.ProbeClient is one.
type Gateway interface {
	Register(ctx context.Context, reg wire.Register) (lease.Grant, error)
	Heartbeat(ctx context.Context, hb wire.Heartbeat) (lease.Grant, error)
	Pull(ctx context.Context, epoch, after int64, wait time.Duration) (wire.Intents, error)
	Report(ctx context.Context, epoch int64, evs []wire.Event) error
}

// Config is a Probe's configuration.
type Config struct {
	Host      string
	Slots     int
	StateDir  string        // status.json, the runtimes' state
	Supervise time.Duration // session supervision cadence
	Heal      HealPolicy
	Channels  []ChannelSupervisor // ssh_remote, dialog
	// Tasks is the Adapter Host that starts agent adapters on task intents; nil: none.
	Tasks Tasker
}

// Probe is one host's data plane.
type Probe struct {
	cfg    Config
	gw     Gateway
	guard  *lease.Guard
	ledger *lease.Ledger[json.RawMessage]
	rt     *HostRuntime
	heal   *SelfHeal
	events *Emitter
	caps   wire.Capabilities

	// fenceMu orders fences against the Probe's own unfences: an intent admitted before a fence
	// can never lift a session's fence after it (fenceGen changed).
	fenceMu  sync.Mutex
	fenceGen int64

	mu       sync.Mutex
	boxes    map[string]*box
	refused  int // intents refused for their epoch or a fence
	inflight map[string]bool
	devboxMu keyedMutex
	lastSync time.Time
}

// New returns a Probe of cfg.Host.
func New(cfg Config, gw Gateway, rt *HostRuntime) *Probe {
	if cfg.Supervise == 0 {
		cfg.Supervise = time.Second
	}
	if cfg.Heal.MaxAttempts == 0 {
		cfg.Heal = HealPolicy{MaxAttempts: 5, Backoff: time.Second, MaxBackoff: 30 * time.Second}
	}
	p := &Probe{cfg: cfg, gw: gw, rt: rt, ledger: lease.NewLedger[json.RawMessage](4096), heal: NewSelfHeal(cfg.Heal),
		events: NewEmitter(10000), boxes: map[string]*box{}, inflight: map[string]bool{}}
	var channels []string
	for _, c := range cfg.Channels {
		channels = append(channels, c.Name())
	}
	p.caps = Capabilities(rt.Names(), channels)
	p.guard = lease.New(renewer{p}, fencer{p}, time.Second)
	return p
}

// Run runs the Probe's loops until ctx ends: the lease, intents, session supervision and
// self-heal, events and status.
// Emit queues an event for the Gateway: what a channel reports (its connections' activity), under
// the epoch held when it is sent.
func (p *Probe) Emit(ev wire.Event) { p.events.Emit(ev) }

func (p *Probe) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wg.Go(func() { p.events.Run(ctx, p.gw, p.guard.Epoch) })
	wg.Go(func() { p.pullLoop(ctx) })
	wg.Go(func() { p.superviseLoop(ctx) })
	return p.guard.Run(ctx)
}

// Epoch is the epoch held, 0 when fenced.
func (p *Probe) Epoch() int64 { return p.guard.Epoch() }

// renewer is the Lease Guard's Gateway, with the Health Reporter's heartbeat.
type renewer struct{ p *Probe }

func (r renewer) Register(ctx context.Context) (lease.Grant, error) {
	return r.p.gw.Register(ctx, wire.Register{Host: r.p.cfg.Host, Capacity: r.p.capacity(), Capabilities: r.p.caps})
}

func (r renewer) Renew(ctx context.Context, epoch int64) (lease.Grant, error) {
	healthy, detail := r.p.health()
	return r.p.gw.Heartbeat(ctx, wire.Heartbeat{Host: r.p.cfg.Host, Epoch: epoch, Capacity: r.p.capacity(), Healthy: healthy, Detail: detail})
}

func (p *Probe) capacity() wire.Capacity {
	return wire.Capacity{Slots: p.cfg.Slots, Used: p.rt.Count()}
}

// health is the Health Reporter: the host is healthy while none of its sandboxes is degraded.
func (p *Probe) health() (bool, string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	degraded := 0
	for _, b := range p.boxes {
		if b.phase == wire.PhaseDegraded {
			degraded++
		}
	}
	return degraded == 0, fmt.Sprintf("%d sandboxes, %d degraded", len(p.boxes), degraded)
}

// fencer is the Lease Guard's Fencer.
type fencer struct{ p *Probe }

// Fence fences every session of every sandbox on the host (session.fence on each appliance's
// host listener). The sessions stay fenced across a new lease until the Gateway re-issues their
// DevBox under the new epoch.
func (f fencer) Fence(reason string) {
	p := f.p
	p.fenceMu.Lock()
	defer p.fenceMu.Unlock()
	p.fenceGen++
	boxes := p.boxList()
	var wg sync.WaitGroup
	for _, b := range boxes {
		wg.Go(func() { p.fenceBox(b, "lease: "+reason) })
	}
	wg.Wait()
	p.events.Emit(wire.Event{Kind: wire.EventFence, Reason: fmt.Sprintf("%s; %d sandboxes fenced", reason, len(boxes))})
}

func (f fencer) Unfence(int64) {}

// fenceBox fences b's sessions; the caller holds fenceMu.
func (p *Probe) fenceBox(b *box, reason string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	b.mu.Lock()
	br, sessions, agent := b.bridge, b.spec.Sessions, b.spec.Agent
	b.fenced = true
	b.mu.Unlock()
	if br == nil {
		return // still booting: boot sees the fence (fenceGen) and fences it when it is up
	}
	for _, s := range sessions {
		if err := br.Fence(ctx, agent, s.Name, reason); err != nil {
			p.events.Emit(wire.Event{Kind: wire.EventFault, DevBox: b.spec.Name, Session: s.Name, Reason: "session.fence: " + err.Error()})
		}
	}
}

// boxList is the boxes held now.
func (p *Probe) boxList() []*box {
	p.mu.Lock()
	defer p.mu.Unlock()
	boxes := make([]*box, 0, len(p.boxes))
	for _, b := range p.boxes {
		boxes = append(boxes, b)
	}
	return boxes
}
