package lifecycle

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/allox-os/allox/internal/rpc"
	"github.com/allox-os/allox/services/internal/plugin"
	"github.com/allox-os/allox/services/internal/store"
	"github.com/allox-os/allox/services/internal/tracked"
	"github.com/allox-os/allox/services/internal/workspace"
)

// Config configures the plugin (the daemon's --observer flags).
type Config struct {
	Libexec  string // directory of the four programs
	Pins     string // their sha256 pins
	Scope    string // optional scope file
	Evidence string // parent of the evidence sets, outside every workspace (STATE/effects)
	// StoreRoot and StoreState are handed to the recover program (the daemon's --root, --state).
	StoreRoot, StoreState string
	// StepTimeout bounds each capture, the recovery and the verifier; default 2 minutes.
	StepTimeout time.Duration
}

// Plugin is the system-effects observer's daemon side.
type Plugin struct {
	cfg   Config
	ws    *workspace.Service
	progs *checkedPrograms

	mu        sync.Mutex
	standby   *observer               // started with --standby, ready for the next run; nil while none is
	exclusive map[string]string       // session key → id of the protocol 3 run that holds the session
	running   map[string]*runObserver // run id → its observer, while the run lives
	refilling bool                    // a standby is being started
	closed    bool
}

// New reads the pins, checks that every program has one and starts a standby observer. Contents
// are checked against the pins each time a program is used (see checkedPrograms), never only once: a
// program changed later (e.g. overmounted) is caught at its next use, and the session fenced.
func New(cfg Config, ws *workspace.Service) (*Plugin, error) {
	if cfg.StepTimeout == 0 {
		cfg.StepTimeout = 2 * time.Minute
	}
	pins, err := ReadPins(cfg.Pins)
	if err != nil {
		return nil, err
	}
	for _, name := range []string{ObserveProgram, VerifyProgram, RecoveryVerifyProgram, RecoverProgram} {
		if _, ok := pins[filepath.Join(cfg.Libexec, name)]; !ok {
			return nil, fmt.Errorf("system-effects observer: %s has no pin in %s: %w", name, cfg.Pins, ErrPin)
		}
	}
	p := &Plugin{cfg: cfg, ws: ws, progs: newCheckedPrograms(pins), exclusive: map[string]string{}, running: map[string]*runObserver{}}
	go p.refill()
	return p, nil
}

// Close stops the standby observer.
func (p *Plugin) Close() {
	p.mu.Lock()
	o := p.standby
	p.standby = nil
	p.closed = true
	p.mu.Unlock()
	if o != nil {
		o.abandon()
	}
}

// refill starts a standby observer unless one is ready. A run's start takes it: the observer's
// process start and its decoding of the kernel's types, the largest part of capturing A, are
// then behind it. Failing to start one is not an error here: the next run starts its own, and
// reports why that fails.
func (p *Plugin) refill() {
	p.mu.Lock()
	busy := p.standby != nil || p.refilling || p.closed
	p.refilling = !busy
	p.mu.Unlock()
	if busy {
		return
	}
	o, err := p.startStandby(true)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refilling = false
	if err != nil {
		return
	}
	if p.closed {
		go o.abandon()
		return
	}
	p.standby = o
}

// startStandby starts an observer with --standby. In the background (a refill) it runs at nice
// 19 from its first instruction, which the observer keeps until its run begins: its start then
// takes only CPU time the run in progress leaves.
func (p *Plugin) startStandby(background bool) (*observer, error) {
	prog, err := p.progs.get(filepath.Join(p.cfg.Libexec, ObserveProgram))
	if err != nil {
		return nil, err
	}
	o, err := startObserver(prog, []string{"--standby"})
	if err == nil && background {
		// The main thread, before the runtime has started many others (they inherit it); the
		// observer sets every thread itself too. No begin can reach it before this returns.
		_ = unix.Setpriority(unix.PRIO_PROCESS, o.cmd.Process.Pid, 19)
	}
	return o, err
}

// takeObserver returns a standby observer for a run, starting one if none is ready (or the ready
// one has died), and has a new standby started once the run is done.
func (p *Plugin) takeObserver() (*observer, error) {
	// The standby runs a copy checked when it started; the file is checked again now, as every
	// program is at each use, so that a changed observer fences this run, not a later one.
	if _, err := p.progs.get(filepath.Join(p.cfg.Libexec, ObserveProgram)); err != nil {
		return nil, err
	}
	p.mu.Lock()
	o := p.standby
	p.standby = nil
	p.mu.Unlock()
	if o != nil && !o.hasExited() {
		return o, nil
	}
	if o != nil {
		o.abandon()
	}
	return p.startStandby(false)
}

// Plugin API v1: the plugin's name, its own version and the process.start params it owns.
const (
	Name    = "system-effects"
	Version = "1.0.0" // observer protocols v2 and v3
)

// StartParams are the process.start params the plugin owns.
var StartParams = []string{"recovery", "checkpoint_id"}

// Contribution is what the plugin adds to the daemon (Plugin API v1): the host-only observer.abort
// action — the control plane ends a run's observation, exactly as if the observer had crashed (the
// session is fenced and the run killed) —, its part in every process.start (Run) and its Close.
func (p *Plugin) Contribution() *plugin.Contribution {
	return &plugin.Contribution{
		Actions: map[string]plugin.Action{rpc.ActionObserverAbort: {Handler: p.abort, Scope: plugin.ScopeHost}},
		Run:     p.Run,
		Frozen:  true, // captures A and B of a still sandbox
		Close:   func() error { p.Close(); return nil },
	}
}

func (p *Plugin) abort(_ context.Context, c *plugin.Call) (any, error) {
	var params struct {
		RunID string `json:"run_id"`
	}
	if err := rpc.DecodeParams(c.Params, &params); err != nil {
		return nil, err
	}
	p.mu.Lock()
	ro := p.running[params.RunID]
	p.mu.Unlock()
	if ro == nil || ro.obs == nil {
		return nil, rpc.Errorf(rpc.CodeNotFound, "params.run_id",
			"run %q has no observer running; process.list shows the live runs", params.RunID)
	}
	ro.obs.kill()
	return map[string]any{"run_id": params.RunID, "aborted": true}, nil
}

func sessionKey(agent, session string) string { return agent + "/" + session }

// Run is the plugin's part in a process.start (Plugin API v1): it decodes the params it owns and
// prepares the run's observer (see Prepare).
func (p *Plugin) Run(ctx context.Context, r *plugin.RunStart) (plugin.RunHook, error) {
	rp, err := DecodeRunParams(r.Params)
	if err != nil {
		return nil, err
	}
	ro, undo, err := p.prepare(r.AgentID, r.SessionID, rp)
	if err != nil {
		return nil, err
	}
	r.OnFailure(undo)
	return ro, nil
}

// Prepare adds the run's observer to req.Hooks, as Run does for the daemon. undo reverts what it
// did if the start fails afterwards.
func (p *Plugin) Prepare(_ context.Context, req *tracked.StartRequest, rp RunParams) (func(), error) {
	ro, undo, err := p.prepare(req.AgentID, req.SessionID, rp)
	if err != nil {
		return nil, err
	}
	req.Hooks = append(req.Hooks, tracked.Hook{Name: Name, Observer: ro, Frozen: true})
	return undo, nil
}

func (p *Plugin) prepare(agent, session string, rp RunParams) (*runObserver, func(), error) {
	key := sessionKey(agent, session)
	p.mu.Lock()
	holder := p.exclusive[key]
	p.mu.Unlock()
	if holder != "" {
		return nil, nil, fmt.Errorf("%w: run %s is being recovered under observer protocol 3 and holds session %s; wait for it (process.wait)",
			workspace.ErrBusy, holder, key)
	}
	ro := &runObserver{p: p, agent: agent, session: session, protocol: 2}
	undo := func() {}
	if rp.CheckpointID != "" && rp.Recovery == nil {
		return nil, nil, rpc.Errorf(rpc.CodeInvalidParams, "params.checkpoint_id",
			"params.checkpoint_id names the baseline a recovery restores; add params.recovery (protocol 3) or leave it out")
	}
	if rp.Recovery != nil {
		ro.protocol, ro.recovery = 3, *rp.Recovery
		ro.requireConsistent = rp.Recovery.RequireConsistent == nil || *rp.Recovery.RequireConsistent
		if n := p.ws.ActiveRuns(agent, session); n > 0 {
			return nil, nil, fmt.Errorf("%w: observer protocol 3 restores the whole Session Workspace, and %d run(s) are live in session %s; wait for them",
				workspace.ErrBusy, n, key)
		}
		err := ro.step("baseline", func() error {
			var err error
			ro.baseline, undo, err = p.baseline(agent, session, rp.CheckpointID)
			return err
		})
		if err != nil {
			return nil, nil, err
		}
		p.mu.Lock()
		p.exclusive[key] = "(starting)"
		p.mu.Unlock()
		prevUndo := undo
		undo = func() { p.release(key); prevUndo() }
	}
	return ro, undo, nil
}

// baseline returns the checkpoint a protocol 3 recovery restores: a fresh one, created and pinned
// now, or the caller's, which must exist (and is pinned). undo removes what this call added.
func (p *Plugin) baseline(agent, session, id string) (string, func(), error) {
	if id != "" {
		cp, err := p.ws.GetCheckpoint(agent, session, id)
		if err != nil {
			return "", nil, err
		}
		if cp.Pinned {
			return id, func() {}, nil
		}
		if err := p.ws.PinCheckpoint(agent, session, id, true); err != nil {
			return "", nil, err
		}
		return id, func() { _ = p.ws.PinCheckpoint(agent, session, id, false) }, nil
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	id = "observer-" + strings.ToLower(time.Now().UTC().Format("20060102T150405Z")) + "-" + hex.EncodeToString(b[:])
	if _, err := p.ws.CreateCheckpoint(agent, session, id, store.CheckpointOptions{
		Labels: map[string]string{"allox.observer": "baseline"}, Pin: true}); err != nil {
		return "", nil, fmt.Errorf("observer baseline checkpoint: %w", err)
	}
	return id, func() {
		_ = p.ws.DiscardCheckpoint(agent, session, id)
	}, nil
}

func (p *Plugin) release(key string) {
	p.mu.Lock()
	delete(p.exclusive, key)
	p.mu.Unlock()
}

// RunParams are the process.start params the plugin owns.
type RunParams struct {
	Recovery     *rpc.Recovery // nil: protocol v2
	CheckpointID string        // "" when omitted
}

// DecodeRunParams decodes the plugin's process.start params (recovery, checkpoint_id), naming the
// field at fault.
func DecodeRunParams(params map[string]json.RawMessage) (RunParams, error) {
	var rp RunParams
	if raw, ok := params["checkpoint_id"]; ok {
		var id *string
		if err := json.Unmarshal(raw, &id); err != nil {
			return rp, rpc.Errorf(rpc.CodeInvalidParams, "params.checkpoint_id", "params.checkpoint_id must be a string: a full, existing checkpoint id")
		}
		if id != nil && *id == "" {
			return rp, rpc.Errorf(rpc.CodeInvalidParams, "params.checkpoint_id",
				"params.checkpoint_id is empty: name a full, existing checkpoint id or leave it out for a fresh baseline")
		}
		if id != nil {
			rp.CheckpointID = *id
		}
	}
	recovery := bytes.TrimSpace(params["recovery"])
	if len(recovery) == 0 || string(recovery) == "null" {
		return rp, nil
	}
	var r rpc.Recovery
	dec := json.NewDecoder(bytes.NewReader(recovery))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return rp, rpc.Errorf(rpc.CodeInvalidParams, "params.recovery."+te.Field,
				"params.recovery.%s must be a JSON %s", te.Field, jsonKind(te.Type.Kind().String()))
		}
		return rp, rpc.Errorf(rpc.CodeInvalidParams, "params.recovery",
			"params.recovery must be an object with scrub_runtime and require_consistent (booleans): %v", err)
	}
	rp.Recovery = &r
	return rp, nil
}

func jsonKind(goKind string) string {
	if goKind == "ptr" || goKind == "bool" {
		return "boolean"
	}
	return goKind
}
