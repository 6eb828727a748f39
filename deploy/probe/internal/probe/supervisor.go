package probe

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/allox-os/allox/deploy/probe/internal/spec"
	"github.com/allox-os/allox/deploy/probe/internal/wire"
	"github.com/allox-os/allox/internal/rpc"
)

// box is a DevBox the Session Supervisor watches: its desired spec, its sandbox, and the phases
// it last reported.
type box struct {
	mu       sync.Mutex
	spec     spec.DevBox
	sandbox  Sandbox
	bridge   *Bridge
	fenced   bool // fenced by the Probe (lease)
	phase    string
	sessions map[string]string // session → phase last reported
	cancel   context.CancelFunc
	ctx      context.Context // ends with cancel: the sandbox's channels and agent adapters
	// bootErr is why the last boot failed: self-heal retries it (boot_failed → restart).
	bootErr   error
	bootTrace string
	retrying  bool // a boot retry runs (outside the supervision pass: a boot is long)
}

// adopt hands a booted sandbox to the supervisor (replacing what it had for the DevBox) and to
// the channel supervisors.
func (p *Probe) adopt(d spec.DevBox, sb Sandbox, br *Bridge) *box {
	p.mu.Lock()
	b := p.boxes[d.Name]
	if b == nil {
		b = &box{sessions: map[string]string{}, phase: wire.PhaseBooting}
		p.boxes[d.Name] = b
	}
	p.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	b.mu.Lock()
	if b.cancel != nil {
		b.cancel()
	}
	b.spec, b.sandbox, b.bridge, b.cancel, b.ctx = d, sb, br, cancel, ctx
	b.mu.Unlock()
	for _, c := range p.cfg.Channels {
		c.Attach(ctx, d.Name, sb, func(f Fault) { p.onFault(ctx, b, f) })
	}
	return b
}

// setPhase records and reports a DevBox's phase when it changed.
func (p *Probe) setPhase(d spec.DevBox, phase, reason, trace string) {
	p.mu.Lock()
	b := p.boxes[d.Name]
	if b == nil {
		b = &box{spec: d, sessions: map[string]string{}, cancel: func() {}}
		p.boxes[d.Name] = b
	}
	p.mu.Unlock()
	b.mu.Lock()
	changed := b.phase != phase
	b.phase = phase
	b.mu.Unlock()
	if changed {
		p.events.Emit(wire.Event{Kind: wire.EventPhase, DevBox: d.Name, Phase: phase, Reason: reason, TraceID: trace})
	}
}

func (p *Probe) setSessionPhase(b *box, session, phase, reason string) {
	b.mu.Lock()
	changed := b.sessions[session] != phase
	b.sessions[session] = phase
	name := b.spec.Name
	b.mu.Unlock()
	if changed {
		p.events.Emit(wire.Event{Kind: wire.EventPhase, DevBox: name, Session: session, Phase: phase, Reason: reason})
	}
}

// superviseLoop is the Probe's session supervision and self-heal loop: each pass compares every
// box's desired sessions with what its appliance reports, and hands faults to self-heal.
func (p *Probe) superviseLoop(ctx context.Context) {
	t := time.NewTicker(p.cfg.Supervise)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		boxes := p.boxList()
		var wg sync.WaitGroup
		for _, b := range boxes {
			wg.Go(func() { p.superviseBox(ctx, b) }) // one box's fault never holds up another
		}
		wg.Wait()
		p.writeStatus()
	}
}

func (p *Probe) superviseBox(ctx context.Context, b *box) {
	b.mu.Lock()
	sb, br, d, phase, bootErr := b.sandbox, b.bridge, b.spec, b.phase, b.bootErr
	retry := bootErr != nil && phase == wire.PhaseFailed && !b.retrying
	if retry {
		b.retrying = true
	}
	b.mu.Unlock()
	if retry {
		go func() {
			defer func() { b.mu.Lock(); b.retrying = false; b.mu.Unlock() }()
			p.onFault(ctx, b, Fault{Scope: d.Name, Class: FaultBootFailed, Err: bootErr})
		}()
		return
	}
	if sb == nil || phase == wire.PhaseBooting || phase == wire.PhaseFailed {
		return
	}
	select {
	case <-sb.Done():
		p.onFault(ctx, b, Fault{Scope: d.Name, Class: FaultSandboxExited, Err: errors.New("the sandbox exited")})
		return
	default:
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	allOK := true
	reach := br.Reachable(cctx)
	for _, s := range d.Sessions {
		got, err := br.Session(cctx, d.Agent, s.Name)
		if reach != nil {
			err = reach // what a new connection (a channel's, a restarted bridge's) would meet
		}
		var re *rpc.Error
		switch {
		case errors.As(err, &re) && re.Code == rpc.CodeNotFound:
			allOK = false
			p.onFault(ctx, b, Fault{Scope: d.Name + "/" + s.Name, Class: "session_missing", Err: err})
		case errors.As(err, &re) && re.Code == rpc.CodeQuarantined:
			allOK = false
			p.onFault(ctx, b, Fault{Scope: d.Name + "/" + s.Name, Class: "session_quarantined", Err: err})
		case err != nil:
			class := FaultBridgeUnreachable
			if dg, ok := sb.(Diagnoser); ok {
				dctx, dcancel := context.WithTimeout(ctx, 5*time.Second)
				class = dg.Diagnose(dctx, br.Endpoint())
				dcancel()
			}
			p.onFault(ctx, b, Fault{Scope: d.Name, Class: class, Err: err})
			return
		case got.Fenced != nil:
			p.setSessionPhase(b, s.Name, wire.PhaseFenced, got.Fenced.Reason)
		default:
			p.setSessionPhase(b, s.Name, wire.PhaseRunning, "")
		}
	}
	b.mu.Lock()
	fenced := b.fenced
	b.mu.Unlock()
	switch {
	case fenced:
		p.setPhase(d, wire.PhaseFenced, "the probe holds no lease for this devbox's epoch", "")
	case allOK && phase == wire.PhaseDegraded:
		// stays degraded until the Gateway re-issues it: an escalation is the Gateway's to close
	case allOK:
		p.setPhase(d, wire.PhaseRunning, "", "")
	}
}

// onFault hands a fault to self-heal with this box's local actions, and reports what it did.
// While the Probe is fenced it heals nothing: every action is state-changing.
func (p *Probe) onFault(ctx context.Context, b *box, f Fault) {
	b.mu.Lock()
	d, fenced := b.spec, b.fenced
	b.mu.Unlock()
	session := ""
	if len(f.Scope) > len(d.Name) {
		session = f.Scope[len(d.Name)+1:]
	}
	if fenced || p.guard.Epoch() == 0 {
		return // every action is state-changing: nothing is healed while fenced
	}
	o, why := p.heal.Handle(ctx, f, p.actions(b))
	if o == Waiting {
		return
	}
	p.events.Emit(wire.Event{Kind: wire.EventFault, DevBox: d.Name, Session: session, Reason: why})
	switch o {
	case Degraded, Escalated:
		if session != "" {
			p.setSessionPhase(b, session, wire.PhaseDegraded, why)
		}
		p.setPhase(d, wire.PhaseDegraded, why, "")
		p.events.Emit(wire.Event{Kind: wire.EventEscalation, DevBox: d.Name, Session: session, Reason: why})
	}
}

// actions are the bounded local actions on b: reconnect the bridge, restart the sandbox (or retry
// its failed boot), and, where the sandbox's runtime has them (QEMU's user-network forward to the
// appliance's host listener), rebind that forward and refresh the bridge's endpoint.
func (p *Probe) actions(b *box) Actions {
	b.mu.Lock()
	sb := b.sandbox
	b.mu.Unlock()
	a := Actions{
		Reconnect: func(ctx context.Context) error {
			return p.rebridge(ctx, b, sb)
		},
		Restart: func(ctx context.Context) error {
			b.mu.Lock()
			d, bootErr, trace := b.spec, b.bootErr, b.bootTrace
			b.mu.Unlock()
			if bootErr != nil {
				return p.retryBoot(ctx, b, d, trace)
			}
			sb, err := p.rt.Restart(ctx, d)
			if err != nil {
				return err
			}
			return p.rebridge(ctx, b, sb)
		},
	}
	if rb, ok := sb.(Rebinder); ok {
		a.Rebind = func(ctx context.Context) error {
			b.mu.Lock()
			br := b.bridge
			b.mu.Unlock()
			if err := rb.Rebind(ctx); err != nil {
				return err
			}
			if sb.Endpoint() != br.Endpoint() {
				return nil // bound again on another port: the bridge's endpoint is stale, refreshed next
			}
			_, err := br.Info(ctx)
			return err
		}
	}
	if er, ok := sb.(EndpointRefresher); ok {
		a.RefreshEndpoint = func(ctx context.Context) error {
			if err := er.RefreshEndpoint(ctx); err != nil {
				return err
			}
			return p.rebridge(ctx, b, sb)
		}
	}
	return a
}

// rebridge makes b's bridge talk to sb's endpoint as it is now, once it answers system.info.
func (p *Probe) rebridge(ctx context.Context, b *box, sb Sandbox) error {
	br := NewBridge(sb.Endpoint(), sb.Token())
	if _, err := br.Info(ctx); err != nil {
		return err
	}
	b.mu.Lock()
	b.sandbox, b.bridge = sb, br
	b.mu.Unlock()
	return nil
}

// retryBoot boots b's DevBox again after a failed boot, as its boot intent would, under the
// epoch held now (onFault heals nothing without one).
func (p *Probe) retryBoot(ctx context.Context, b *box, d spec.DevBox, trace string) error {
	unlock := p.lockDevBox(d.Name)
	defer unlock()
	p.mu.Lock()
	current := p.boxes[d.Name] == b
	p.mu.Unlock()
	if !current {
		return errors.New("the devbox was stopped meanwhile")
	}
	b.mu.Lock()
	booted := b.bootErr == nil
	b.mu.Unlock()
	if booted {
		return nil // a boot intent re-issued meanwhile booted it
	}
	p.fenceMu.Lock()
	gen := p.fenceGen
	p.fenceMu.Unlock()
	err := p.boot(ctx, d, trace, gen)
	p.bootDone(d, err, trace)
	return err
}

// Status is what `probe status` prints.
type Status struct {
	Host     string            `json:"host"`
	Epoch    int64             `json:"epoch"`
	Fenced   bool              `json:"fenced"`
	Refused  int               `json:"intents_refused"`
	Events   map[string]int    `json:"events"`
	Heal     map[string]int    `json:"self_heal"`
	DevBoxes []DevBoxStatus    `json:"devboxes"`
	Caps     wire.Capabilities `json:"capabilities"`
	At       time.Time         `json:"at"`
}

// DevBoxStatus is one box in Status.
type DevBoxStatus struct {
	Name     string            `json:"name"`
	Phase    string            `json:"phase"`
	Endpoint string            `json:"endpoint,omitempty"`
	Sessions map[string]string `json:"sessions"`
}

// Status returns the Probe's status now.
func (p *Probe) Status() Status {
	g, fenced := p.guard.Grant()
	sent, dropped, queued := p.events.Stats()
	st := Status{Host: p.cfg.Host, Epoch: g.Epoch, Fenced: fenced, Heal: p.heal.Counts(), Caps: p.caps, At: time.Now().UTC(),
		Events: map[string]int{"sent": sent, "dropped": dropped, "queued": queued}}
	p.mu.Lock()
	st.Refused = p.refused
	p.mu.Unlock()
	boxes := p.boxList()
	for _, b := range boxes {
		b.mu.Lock()
		ds := DevBoxStatus{Name: b.spec.Name, Phase: b.phase, Sessions: map[string]string{}}
		if b.sandbox != nil {
			ds.Endpoint = b.sandbox.Endpoint()
		}
		for k, v := range b.sessions {
			ds.Sessions[k] = v
		}
		b.mu.Unlock()
		st.DevBoxes = append(st.DevBoxes, ds)
	}
	sort.Slice(st.DevBoxes, func(i, j int) bool { return st.DevBoxes[i].Name < st.DevBoxes[j].Name })
	return st
}

// StatusFile is where the Probe writes its status in its state directory.
const StatusFile = "status.json"

func (p *Probe) writeStatus() {
	if p.cfg.StateDir == "" {
		return
	}
	b, _ := json.MarshalIndent(p.Status(), "", "  ")
	tmp := filepath.Join(p.cfg.StateDir, StatusFile+".tmp")
	if os.WriteFile(tmp, append(b, '\n'), 0o600) == nil {
		os.Rename(tmp, filepath.Join(p.cfg.StateDir, StatusFile))
	}
}
