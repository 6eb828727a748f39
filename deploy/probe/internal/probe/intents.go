package probe

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/allox-os/allox/deploy/probe/internal/spec"
	"github.com/allox-os/allox/deploy/probe/internal/wire"
)

// pullLoop long-polls the Gateway for the intents of the epoch held and executes each.
func (p *Probe) pullLoop(ctx context.Context) {
	var after int64
	for ctx.Err() == nil {
		epoch := p.guard.Epoch()
		if epoch == 0 {
			select {
			case <-ctx.Done():
			case <-p.guard.Changed():
			}
			after = 0
			continue
		}
		ins, err := p.gw.Pull(ctx, epoch, after, 10*time.Second)
		if err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
			continue
		}
		after = ins.Revision
		for _, in := range ins.Intents {
			p.mu.Lock()
			busy := p.inflight[in.ID]
			p.inflight[in.ID] = true
			p.mu.Unlock()
			if !busy {
				go p.Execute(ctx, in)
			}
		}
	}
}

// Execute runs one intent: only under the epoch the Probe holds now and not while fenced, and
// once per intent id (a duplicate gets the first run's outcome, reported again).
func (p *Probe) Execute(ctx context.Context, in wire.Intent) {
	defer func() { p.mu.Lock(); delete(p.inflight, in.ID); p.mu.Unlock() }()
	if err := p.guard.Admit(in.Epoch); err != nil {
		p.mu.Lock()
		p.refused++
		p.mu.Unlock()
		return
	}
	// One DevBox's intents run one at a time, in the order they arrive (a boot re-issued under
	// a new epoch waits for the old one); other DevBoxes' run beside them.
	unlock := p.lockDevBox(in.DevBox)
	defer unlock()
	if err := p.guard.Admit(in.Epoch); err != nil { // again: the wait may have outlived the epoch
		p.mu.Lock()
		p.refused++
		p.mu.Unlock()
		return
	}
	p.fenceMu.Lock()
	gen := p.fenceGen
	p.fenceMu.Unlock()
	res, err, _ := p.ledger.Do(in.ID, func() (json.RawMessage, error) { return p.apply(ctx, in, gen) })
	ev := wire.Event{Kind: wire.EventIntentDone, IntentID: in.ID, DevBox: in.DevBox, Session: in.Session, TraceID: in.TraceID, Result: res}
	if err != nil {
		ev.Kind, ev.Reason = wire.EventIntentFailed, err.Error()
	}
	p.events.Emit(ev)
}

func (p *Probe) lockDevBox(name string) (unlock func()) { return p.devboxMu.lock(name) }

func (p *Probe) apply(ctx context.Context, in wire.Intent, gen int64) (json.RawMessage, error) {
	switch in.Kind {
	case wire.IntentBoot:
		if in.Spec == nil {
			return nil, errors.New("boot intent without a spec")
		}
		err := p.boot(ctx, *in.Spec, in.TraceID, gen)
		p.bootDone(*in.Spec, err, in.TraceID)
		return nil, err
	case wire.IntentStop:
		return nil, p.stop(ctx, in.DevBox, in.TraceID)
	case wire.IntentCheckpoint:
		br, agent, err := p.bridgeOf(in.DevBox)
		if err != nil {
			return nil, err
		}
		id := in.Checkpoint
		if id == "" {
			id = in.ID // unique, and the same on a replay
		}
		cp, err := br.Checkpoint(ctx, agent, in.Session, id, map[string]string{"allox.intent": in.ID})
		if err != nil {
			return nil, err
		}
		return json.Marshal(cp)
	case wire.IntentRollback:
		br, agent, err := p.bridgeOf(in.DevBox)
		if err != nil {
			return nil, err
		}
		s, err := br.Rollback(ctx, agent, in.Session, in.Checkpoint)
		if err != nil {
			return nil, err
		}
		return json.Marshal(map[string]string{"head": s.Head})
	case wire.IntentSnapshot:
		return p.snapshotVM(ctx, in)
	case wire.IntentTask:
		return p.startTask(in)
	}
	return nil, fmt.Errorf("intent kind %q is unknown to this probe", in.Kind)
}

// boot is the Worker Sandbox lifecycle's start: boot (or adopt) the sandbox, create the agent and
// the sessions, lift the Probe's own fences (this intent re-issues the DevBox under the current
// epoch), and hand the box to the Session Supervisor.
func (p *Probe) boot(ctx context.Context, d spec.DevBox, trace string, gen int64) error {
	p.setPhase(d, wire.PhaseBooting, "", trace)
	sb, err := p.rt.Ensure(ctx, d)
	if err != nil {
		return err
	}
	br := NewBridge(sb.Endpoint(), sb.Token())
	if err := br.EnsureAgent(ctx, d.Agent); err != nil {
		return fmt.Errorf("agent.create %s: %w", d.Agent, err)
	}
	for _, s := range d.Sessions {
		if _, err := br.EnsureSession(ctx, d.Agent, s.Name); err != nil {
			return fmt.Errorf("session.create %s: %w", s.Name, err)
		}
	}
	b := p.adopt(d, sb, br)
	p.fenceMu.Lock()
	defer p.fenceMu.Unlock()
	if p.fenceGen != gen {
		// A fence came while this intent ran: its sessions are fenced like every other.
		p.fenceBox(b, "lease: fenced while the devbox booted")
		return errFencedWhileBooting
	}
	for _, s := range d.Sessions {
		if err := br.UnfenceOwn(ctx, d.Agent, s.Name); err != nil {
			return fmt.Errorf("session.unfence %s: %w", s.Name, err)
		}
	}
	b.mu.Lock()
	b.fenced = false
	b.mu.Unlock()
	p.heal.Clear(d.Name) // the Gateway re-issued the DevBox: what it was escalated for is its answer
	p.setPhase(d, wire.PhaseRunning, "", trace)
	return nil
}

var errFencedWhileBooting = errors.New("fenced while booting")

// bootDone records a boot's outcome: a failed boot is marked failed and left to self-heal, which
// retries it with backoff and escalates it (boot_failed); a boot that lost its fence is not.
func (p *Probe) bootDone(d spec.DevBox, err error, trace string) {
	if err != nil {
		p.setPhase(d, wire.PhaseFailed, err.Error(), trace)
	}
	p.mu.Lock()
	b := p.boxes[d.Name]
	p.mu.Unlock()
	if b == nil {
		return
	}
	b.mu.Lock()
	b.spec, b.bootErr, b.bootTrace = d, nil, trace
	if err != nil && !errors.Is(err, errFencedWhileBooting) {
		b.bootErr = err
	}
	b.mu.Unlock()
}

func (p *Probe) stop(ctx context.Context, name, trace string) error {
	p.mu.Lock()
	b := p.boxes[name]
	delete(p.boxes, name)
	p.mu.Unlock()
	if b != nil {
		b.cancel()
	}
	p.heal.Clear(name)
	if err := p.rt.Stop(ctx, name); err != nil {
		return err
	}
	p.events.Emit(wire.Event{Kind: wire.EventPhase, DevBox: name, Phase: wire.PhaseStopped, TraceID: trace})
	return nil
}

func (p *Probe) bridgeOf(name string) (*Bridge, string, error) {
	p.mu.Lock()
	b := p.boxes[name]
	p.mu.Unlock()
	if b == nil {
		return nil, "", fmt.Errorf("devbox %s has no sandbox on this host (boot it first)", name)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.bridge, b.spec.Agent, nil
}

// snapshotVM is the Snapshot Client's VM-level half (QMP); session checkpoints go through the
// appliance (IntentCheckpoint).
func (p *Probe) snapshotVM(ctx context.Context, in wire.Intent) (json.RawMessage, error) {
	sb, ok := p.rt.Get(in.DevBox)
	if !ok {
		return nil, fmt.Errorf("devbox %s has no sandbox on this host", in.DevBox)
	}
	vs, ok := sb.(VMSnapshotter)
	if !ok {
		return nil, fmt.Errorf("devbox %s: its runtime has no VM to snapshot (use the qemu runtime)", in.DevBox)
	}
	name := in.Checkpoint
	if name == "" {
		name = in.ID
	}
	if err := vs.SnapshotVM(ctx, name); err != nil {
		return nil, err
	}
	return json.Marshal(map[string]string{"vm_snapshot": name})
}
