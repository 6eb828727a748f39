// Package workspace is the daemon's application service: it composes the Btrfs store, tracked
// execution and fencing into the operations the RPC layer exposes, and enforces their rules — the
// execution lease (live runs keep a session from being rolled back or deleted), fences, and the
// Session/Turn checkpoint policy. It knows nothing of HTTP.
package workspace

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/allox-os/allox/internal/limit"
	"github.com/allox-os/allox/services/internal/audit"
	"github.com/allox-os/allox/services/internal/fence"
	"github.com/allox-os/allox/services/internal/store"
	"github.com/allox-os/allox/services/internal/tracked"
)

// ErrBusy means the session has live runs and the operation needs a quiet session.
var ErrBusy = errors.New("session has live processes")

// BusyError says how many runs hold the session's execution lease and what to do.
type BusyError struct {
	AgentID, SessionID string
	Live               int
	Op                 string
}

func (e *BusyError) Error() string {
	return fmt.Sprintf("%s: session %s/%s has %d live run(s) holding its execution lease; wait for them, kill them with process.kill, or pass kill_processes: true",
		e.Op, e.AgentID, e.SessionID, e.Live)
}

func (e *BusyError) Is(target error) bool { return target == ErrBusy }

// Deps are what a Service composes. Store, Runs, Fences and Policy are required.
type Deps struct {
	Store  *store.Store
	Runs   *tracked.Manager
	Fences *fence.Registry
	Policy *Policy
	// Turns is the sessions' turn history; nil: turns are not recorded.
	Turns *TurnLog
	// Limits are the sessions' resource limits; nil: none (every session unlimited).
	Limits *Limits
	// Audit, if set, receives the events the service causes without a request (the RPC layer
	// audits requests); see Record.
	Audit *audit.Log
	// KillOnRollback is the default for session.rollback's kill_processes
	// (--kill-session-processes-on-rollback).
	KillOnRollback bool
	// Quota are the sessions' space limits; nil: quotas are off.
	Quota *Quota
}

// Service is the workspace runtime: the only way to the store, the runs, the fences and the
// policy, so that every change of a session's state takes the session's lock.
type Service struct {
	store          *store.Store
	runs           *tracked.Manager
	fences         *fence.Registry
	policy         *Policy
	turns          *TurnLog
	limits         *Limits
	auditLog       *audit.Log
	killOnRollback bool
	quota          *Quota

	locks sync.Map // agent/session → *sessionLock: one state change per session at a time
}

// New returns the service over d.
func New(d Deps) *Service {
	return &Service{store: d.Store, runs: d.Runs, fences: d.Fences, policy: d.Policy, turns: d.Turns, limits: d.Limits,
		auditLog: d.Audit, killOnRollback: d.KillOnRollback, quota: d.Quota}
}

// Record appends e to the audit log, if there is one, with origin "daemon" unless it names one.
// A log that cannot be written does not fail what it records.
func (s *Service) Record(e audit.Entry) {
	if s.auditLog == nil {
		return
	}
	if e.Origin == "" {
		e.Origin = audit.Daemon
	}
	_ = s.auditLog.Append(e)
}

// Close releases the store (its lock on the state dir, its background reaper). Runs are not
// touched: they die with the daemon.
func (s *Service) Close() error { return s.store.Close() }

// SessionOptions are session.create's optional settings.
type SessionOptions struct {
	TurnCheckpoints *bool
	// Limits override the image's default session limits, within its maximum.
	Limits limit.Set
	// Quota (bytes) overrides the image's default session quota, within its maximum; 0: default.
	Quota int64
}

// CreateSession creates the session with the default limits (see CreateSessionWith).
func (s *Service) CreateSession(agent, id string, turnCheckpoints *bool) (*store.Session, error) {
	return s.CreateSessionWith(agent, id, SessionOptions{TurnCheckpoints: turnCheckpoints})
}

// CreateSessionWith creates the session, records its limits and, when the turn policy is on, makes
// its baseline checkpoint. Limits out of bounds are refused before anything is made; if a later
// step fails the session is removed again: a failed request changes nothing.
func (s *Service) CreateSessionWith(agent, id string, opt SessionOptions) (*store.Session, error) {
	var limits limit.Set
	if s.limits != nil {
		var err error
		if limits, err = s.limits.Resolve(opt.Limits); err != nil {
			return nil, err
		}
	} else if !opt.Limits.IsZero() {
		return nil, &LimitError{Field: "limits", Reason: "this daemon applies no session limits; leave limits out"}
	}
	if err := s.quota.check(opt.Quota); err != nil {
		return nil, err
	}
	if _, err := s.store.GetAgent(agent); err != nil {
		return nil, err
	}
	defer s.lock(agent, id)()
	sess, err := s.store.CreateSessionWith(agent, id, store.SessionOptions{Quota: opt.Quota})
	if err != nil {
		return nil, err
	}
	undo := func(err error) (*store.Session, error) {
		return nil, errors.Join(err, s.forgetSession(agent, id), s.store.DeleteSession(agent, id))
	}
	// current/ belongs to the runs' unprivileged identity from the start, so that every
	// checkpoint of it (the baseline first) and every rollback agrees with what runs see.
	if err := s.runs.Own(sess.Current); err != nil {
		return undo(fmt.Errorf("hand current/ to the runs' identity: %w", err))
	}
	if s.limits != nil {
		if err := s.limits.Set(agent, id, limits); err != nil {
			return undo(err)
		}
	}
	if opt.TurnCheckpoints != nil {
		if err := s.policy.SetSession(agent, id, *opt.TurnCheckpoints); err != nil {
			return undo(err)
		}
	}
	if s.policy.Enabled(agent, id) {
		opt := store.CheckpointOptions{Labels: map[string]string{"allox.kind": "baseline"}}
		if _, err := s.store.CreateCheckpoint(agent, id, BaselineCheckpoint, opt); err != nil {
			return undo(fmt.Errorf("baseline checkpoint: %w", err))
		}
		if sess, err = s.store.GetSession(agent, id); err != nil {
			return nil, err
		}
	}
	return sess, nil
}

// forgetSession drops a session's policy and limits.
func (s *Service) forgetSession(agent, id string) error {
	err := s.policy.ForgetSession(agent, id)
	if s.turns != nil {
		err = errors.Join(err, s.turns.Forget(agent, id))
	}
	if s.limits != nil {
		err = errors.Join(err, s.limits.Forget(agent, id))
	}
	return err
}

// SessionLimits returns a session's effective limits (the zero Set without Limits).
func (s *Service) SessionLimits(agent, session string) (limit.Set, error) {
	if s.limits == nil {
		return limit.Set{}, nil
	}
	return s.limits.Session(agent, session)
}

// BaselineCheckpoint is the id of the checkpoint made at session creation under the turn policy.
const BaselineCheckpoint = "baseline"

// DeleteSession deletes a quiet, unfenced session and forgets its policy. A fenced session is
// refused with the fence's reason: its state is what the control plane must review, so only
// session.unfence (host listener) makes it deletable. A fence belongs to the agent/session id and
// is never dropped by a delete: a session created again with the id of a fenced one starts fenced.
func (s *Service) DeleteSession(agent, id string) error {
	defer s.lock(agent, id)()
	if err := s.fences.Check(agent, id); err != nil {
		return err
	}
	if n := s.runs.Active(agent, id); n > 0 {
		return &BusyError{AgentID: agent, SessionID: id, Live: n, Op: "session.delete"}
	}
	if err := s.store.DeleteSession(agent, id); err != nil {
		return err
	}
	return errors.Join(s.forgetSession(agent, id), s.runs.ForgetSession(agent, id))
}

// DeleteCheckpoint deletes a checkpoint of an unfenced session.
func (s *Service) DeleteCheckpoint(agent, session, id string) error {
	defer s.lock(agent, session)()
	if err := s.fences.Check(agent, session); err != nil {
		return err
	}
	return s.store.DeleteCheckpoint(agent, session, id)
}

// PinCheckpoint sets or clears a checkpoint's pin (a pinned checkpoint refuses deletion). A fenced
// session may be pinned and unpinned: the pin only keeps its state.
func (s *Service) PinCheckpoint(agent, session, id string, pinned bool) error {
	defer s.lock(agent, session)()
	return s.store.Pin(agent, session, id, pinned)
}

// DiscardCheckpoint unpins and deletes a checkpoint that a failed request made, fenced or not: the
// failed request then changes nothing (its failure may have fenced the session).
func (s *Service) DiscardCheckpoint(agent, session, id string) error {
	defer s.lock(agent, session)()
	return errors.Join(s.store.Pin(agent, session, id, false), s.store.DeleteCheckpoint(agent, session, id))
}

// Fence fences an existing session for reason. A session that is fenced already keeps its fence
// (and its evidence): the call is refused with that fence's reason.
func (s *Service) Fence(agent, session, reason string) (*store.Session, error) {
	defer s.lock(agent, session)()
	sess, err := s.store.GetSession(agent, session)
	if err != nil {
		return nil, err
	}
	if err := s.fences.Check(agent, session); err != nil {
		return nil, err
	}
	if err := s.fences.Fence(agent, session, reason, ""); err != nil {
		return nil, err
	}
	return sess, nil
}

// Unfence lifts the fence of an existing session (a no-op if it has none).
func (s *Service) Unfence(agent, session string) (*store.Session, error) {
	defer s.lock(agent, session)()
	sess, err := s.store.GetSession(agent, session)
	if err != nil {
		return nil, err
	}
	if _, err := s.fences.Unfence(agent, session); err != nil {
		return nil, err
	}
	return sess, nil
}

// CreateCheckpoint snapshots the session unless it is fenced.
func (s *Service) CreateCheckpoint(agent, session, id string, opt store.CheckpointOptions) (*store.Checkpoint, error) {
	defer s.lock(agent, session)()
	if err := s.fences.Check(agent, session); err != nil {
		return nil, err
	}
	return s.store.CreateCheckpoint(agent, session, id, opt)
}

// Rollback restores the session's current/ from a checkpoint. Live runs refuse it unless kill is
// true (or KillOnRollback when kill is nil): then the session's cgroup is killed and emptied first.
func (s *Service) Rollback(ctx context.Context, agent, session, checkpoint string, kill *bool) (*store.Session, error) {
	defer s.lock(agent, session)()
	// Leases (share transfers of the session's files) are refused from here on, and the ones
	// held are waited for before anything changes.
	defer s.rollingBack(agent, session)()
	if err := s.fences.Check(agent, session); err != nil {
		return nil, err
	}
	if _, err := s.store.GetCheckpoint(agent, session, checkpoint); err != nil {
		return nil, err
	}
	if n := s.runs.Active(agent, session); n > 0 {
		if !s.killFor(kill) {
			return nil, &BusyError{AgentID: agent, SessionID: session, Live: n, Op: "session.rollback"}
		}
		// The runs' end (their observer's fence or recovery) acts under this lock.
		if err := s.lend(agent, session, func() error { return s.runs.KillSession(ctx, agent, session) }); err != nil {
			return nil, fmt.Errorf("kill the session's processes before rollback: %w", err)
		}
	}
	return s.store.Rollback(ctx, agent, session, checkpoint)
}

func (s *Service) killFor(kill *bool) bool {
	if kill != nil {
		return *kill
	}
	return s.killOnRollback
}

// StartProcess starts a tracked, sandboxed run in the session unless it is fenced.
func (s *Service) StartProcess(ctx context.Context, req tracked.StartRequest) (*tracked.Status, error) {
	return s.start(req, func(req tracked.StartRequest) (*tracked.Status, error) { return s.runs.Start(ctx, req) })
}

// StartAttached starts a run like StartProcess with its standard streams (or a terminal of size
// term) given to the caller (tracked.Manager.StartAttached), who closes them.
func (s *Service) StartAttached(ctx context.Context, req tracked.StartRequest, term *tracked.TermSize) (*tracked.Status, *tracked.Attached, error) {
	var a *tracked.Attached
	st, err := s.start(req, func(req tracked.StartRequest) (st *tracked.Status, err error) {
		st, a, err = s.runs.StartAttached(ctx, req, term)
		return st, err
	})
	return st, a, err
}

// start runs start with req's workspace filled in, under the session's lock, unless the session
// is fenced.
func (s *Service) start(req tracked.StartRequest, start func(tracked.StartRequest) (*tracked.Status, error)) (*tracked.Status, error) {
	defer s.lock(req.AgentID, req.SessionID)()
	if err := s.fences.Check(req.AgentID, req.SessionID); err != nil {
		return nil, err
	}
	p, err := s.store.RunPaths(req.AgentID, req.SessionID)
	if err != nil {
		return nil, err
	}
	req.Workspace = tracked.Workspace{Current: p.Current, Shared: p.Shared, AgentDir: p.AgentWorkspace, RunTmp: p.RunTmp,
		SharedWritable: s.policy.SharedWritable(req.AgentID)}
	// The run's start (its observer's Begin, which fences the session if it fails) acts under this lock.
	var st *tracked.Status
	err = s.lend(req.AgentID, req.SessionID, func() error {
		var err error
		st, err = start(req)
		return err
	})
	return st, err
}

// CreateAgent creates the agent and records its turn policy when one is given.
func (s *Service) CreateAgent(id string, turnCheckpoints *bool) (*store.Agent, error) {
	return s.CreateAgentWith(id, AgentOptions{TurnCheckpoints: turnCheckpoints})
}

// AgentOptions are agent.create's optional settings.
type AgentOptions struct {
	TurnCheckpoints *bool // the agent's turn policy; nil: the daemon's default (off unless --turn-checkpoints)
	// SharedWritable lets the agent's runs write its shared/ ("shared": "rw"); the default is
	// read-only. shared/ is outside every rollback, and the daemon does not serialise the
	// agent's concurrent sessions there.
	SharedWritable bool
}

// CreateAgentWith creates the agent and records its options outside the workspace; if that
// fails the agent is removed again.
func (s *Service) CreateAgentWith(id string, opt AgentOptions) (*store.Agent, error) {
	a, err := s.store.CreateAgent(id)
	if err != nil {
		return nil, err
	}
	if opt.TurnCheckpoints != nil || opt.SharedWritable {
		if err := s.policy.SetAgentOptions(id, opt.TurnCheckpoints, opt.SharedWritable); err != nil {
			return nil, errors.Join(err, s.store.DeleteAgent(id))
		}
	}
	return a, nil
}

// SharedWritable says whether the agent's runs may write its shared/.
func (s *Service) SharedWritable(agent string) bool { return s.policy.SharedWritable(agent) }

// DeleteAgent deletes an agent without sessions and forgets its policy.
func (s *Service) DeleteAgent(id string) error {
	if err := s.store.DeleteAgent(id); err != nil {
		return err
	}
	return errors.Join(s.policy.ForgetAgent(id), s.runs.ForgetAgent(id))
}

// RemoveStale removes, at start-up, what deleted sessions and agents left outside the store: the
// cgroups of sessions and agents the store no longer has (a quarantined session keeps its own).
func (s *Service) RemoveStale() error {
	return s.runs.PruneCgroups(func(agent, session string) bool {
		if session == "" {
			if _, err := s.store.GetAgent(agent); err == nil {
				return true
			}
			for _, q := range s.store.Quarantined() {
				if q.AgentID == agent {
					return true
				}
			}
			return false
		}
		_, err := s.store.GetSession(agent, session)
		return err == nil
	})
}
