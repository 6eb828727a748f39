package probe

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/allox-os/allox/deploy/probe/internal/wire"
)

// Tasker is the Adapter Host's seam (internal/agent.Host): it starts an agent adapter on a task
// intent and returns at once; the adapter reports its statuses through Emit until its task ends.
type Tasker interface {
	StartTask(ctx context.Context, t TaskStart) (json.RawMessage, error)
}

// TaskStart is a task intent the Probe admitted, with what its adapter needs of the Probe.
type TaskStart struct {
	IntentID, TraceID      string
	Epoch                  int64
	DevBox, Agent, Session string
	Task                   wire.TaskSpec
	Sandbox                Sandbox
	// Restart bounds the adapter's restarts: the Probe's self-heal policy.
	Restart HealPolicy
	// Emit sends the adapter's events through the Event Emitter.
	Emit func(wire.Event)
	// Report hands the adapter's escalation to the self-heal loop (its session degrades, the
	// Gateway decides).
	Report func(Fault)
	// Admit says whether the adapter may still change state (start its CLI again): not once the
	// Probe lost the intent's epoch or fenced the session.
	Admit func() error
}

var errNoTasker = errors.New("this probe runs no agent adapters")

// startTask is the task intent: the DevBox's sandbox must be here and not fenced, the session
// one of its spec's; the adapter lives as long as the sandbox does.
func (p *Probe) startTask(in wire.Intent) (json.RawMessage, error) {
	if in.Task == nil {
		return nil, errors.New("task intent without its task")
	}
	if p.cfg.Tasks == nil {
		return nil, errNoTasker
	}
	p.mu.Lock()
	b := p.boxes[in.DevBox]
	p.mu.Unlock()
	if b == nil {
		return nil, fmt.Errorf("devbox %s has no sandbox on this host (boot it first)", in.DevBox)
	}
	b.mu.Lock()
	sb, d, fenced, phase, bctx := b.sandbox, b.spec, b.fenced, b.phase, b.ctx
	b.mu.Unlock()
	switch {
	case sb == nil || bctx == nil || phase == wire.PhaseBooting || phase == wire.PhaseFailed:
		return nil, fmt.Errorf("devbox %s is %s on this host: a task needs it running", in.DevBox, phase)
	case fenced:
		return nil, fmt.Errorf("devbox %s is fenced: no task starts until the Gateway re-issues it", in.DevBox)
	}
	if _, ok := d.Session(in.Session); !ok {
		return nil, fmt.Errorf("session %q is not a session of devbox %s", in.Session, in.DevBox)
	}
	admit := func() error {
		if err := p.guard.Admit(in.Epoch); err != nil {
			return err
		}
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.fenced {
			return fmt.Errorf("devbox %s is fenced", in.DevBox)
		}
		return nil
	}
	return p.cfg.Tasks.StartTask(bctx, TaskStart{IntentID: in.ID, TraceID: in.TraceID, Epoch: in.Epoch, DevBox: in.DevBox, Agent: d.Agent,
		Session: in.Session, Task: *in.Task, Sandbox: sb, Restart: p.cfg.Heal, Emit: p.events.Emit,
		Report: func(f Fault) { p.onFault(bctx, b, f) }, Admit: admit})
}
