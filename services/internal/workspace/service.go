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

// Service is the workspace runtime.
type Service struct {
	Store  *store.Store
	Runs   *tracked.Manager
	Fences *fence.Registry
	Policy *Policy
	// KillOnRollback is the default for session.rollback's kill_processes
	// (--kill-session-processes-on-rollback).
	KillOnRollback bool

	locks sync.Map // agent/session → *sync.Mutex: one state change per session at a time
}

func (s *Service) lock(agent, session string) func() {
	m, _ := s.locks.LoadOrStore(agent+"/"+session, &sync.Mutex{})
	mu := m.(*sync.Mutex)
	mu.Lock()
	return mu.Unlock
}

// CreateSession creates the session and, when the turn policy is on, its baseline checkpoint.
// If the baseline cannot be made the session is removed again: a failed request changes nothing.
func (s *Service) CreateSession(agent, id string, turnCheckpoints *bool) (*store.Session, error) {
	if _, err := s.Store.GetAgent(agent); err != nil {
		return nil, err
	}
	defer s.lock(agent, id)()
	sess, err := s.Store.CreateSession(agent, id)
	if err != nil {
		return nil, err
	}
	// current/ belongs to the runs' unprivileged identity from the start, so that every
	// checkpoint of it (the baseline first) and every rollback agrees with what runs see.
	if err := s.Runs.Own(sess.Current); err != nil {
		return nil, errors.Join(fmt.Errorf("hand current/ to the runs' identity: %w", err), s.Store.DeleteSession(agent, id))
	}
	if turnCheckpoints != nil {
		if err := s.Policy.SetSession(agent, id, *turnCheckpoints); err != nil {
			return nil, errors.Join(err, s.Store.DeleteSession(agent, id))
		}
	}
	if s.Policy.Enabled(agent, id) {
		opt := store.CheckpointOptions{Labels: map[string]string{"allox.kind": "baseline"}}
		if _, err := s.Store.CreateCheckpoint(agent, id, BaselineCheckpoint, opt); err != nil {
			return nil, errors.Join(fmt.Errorf("baseline checkpoint: %w", err), s.Policy.ForgetSession(agent, id), s.Store.DeleteSession(agent, id))
		}
		if sess, err = s.Store.GetSession(agent, id); err != nil {
			return nil, err
		}
	}
	return sess, nil
}

// BaselineCheckpoint is the id of the checkpoint made at session creation under the turn policy.
const BaselineCheckpoint = "baseline"

// DeleteSession deletes a quiet session and forgets its fence and policy.
func (s *Service) DeleteSession(agent, id string) error {
	defer s.lock(agent, id)()
	if n := s.Runs.Active(agent, id); n > 0 {
		return &BusyError{AgentID: agent, SessionID: id, Live: n, Op: "session.delete"}
	}
	if err := s.Store.DeleteSession(agent, id); err != nil {
		return err
	}
	_, err := s.Fences.Unfence(agent, id)
	return errors.Join(err, s.Policy.ForgetSession(agent, id), s.Runs.ForgetSession(agent, id))
}

// CreateCheckpoint snapshots the session unless it is fenced.
func (s *Service) CreateCheckpoint(agent, session, id string, opt store.CheckpointOptions) (*store.Checkpoint, error) {
	defer s.lock(agent, session)()
	if err := s.Fences.Check(agent, session); err != nil {
		return nil, err
	}
	return s.Store.CreateCheckpoint(agent, session, id, opt)
}

// Rollback restores the session's current/ from a checkpoint. Live runs refuse it unless kill is
// true (or KillOnRollback when kill is nil): then the session's cgroup is killed and emptied first.
func (s *Service) Rollback(ctx context.Context, agent, session, checkpoint string, kill *bool) (*store.Session, error) {
	defer s.lock(agent, session)()
	if err := s.Fences.Check(agent, session); err != nil {
		return nil, err
	}
	if _, err := s.Store.GetCheckpoint(agent, session, checkpoint); err != nil {
		return nil, err
	}
	if n := s.Runs.Active(agent, session); n > 0 {
		if !s.killFor(kill) {
			return nil, &BusyError{AgentID: agent, SessionID: session, Live: n, Op: "session.rollback"}
		}
		if err := s.Runs.KillSession(ctx, agent, session); err != nil {
			return nil, fmt.Errorf("kill the session's processes before rollback: %w", err)
		}
	}
	return s.Store.Rollback(ctx, agent, session, checkpoint)
}

func (s *Service) killFor(kill *bool) bool {
	if kill != nil {
		return *kill
	}
	return s.KillOnRollback
}

// StartProcess starts a tracked, sandboxed run in the session unless it is fenced.
func (s *Service) StartProcess(ctx context.Context, req tracked.StartRequest) (*tracked.Status, error) {
	unlock := s.lock(req.AgentID, req.SessionID)
	defer unlock()
	if err := s.Fences.Check(req.AgentID, req.SessionID); err != nil {
		return nil, err
	}
	p, err := s.Store.RunPaths(req.AgentID, req.SessionID)
	if err != nil {
		return nil, err
	}
	req.Workspace = tracked.Workspace{Current: p.Current, Shared: p.Shared, AgentDir: p.AgentWorkspace, RunTmp: p.RunTmp}
	return s.Runs.Start(ctx, req)
}

// EndTurn records the end of an agent turn; after a successful turn, with the policy on, the session
// is checkpointed as "turn-<turn_id>". It returns the checkpoint, or nil when none was made.
func (s *Service) EndTurn(agent, session, turn string, success bool) (*store.Checkpoint, error) {
	if _, err := s.Store.GetSession(agent, session); err != nil {
		return nil, err
	}
	if !success || !s.Policy.Enabled(agent, session) {
		return nil, nil
	}
	opt := store.CheckpointOptions{Labels: map[string]string{"allox.kind": "turn", "allox.turn": turn}}
	return s.CreateCheckpoint(agent, session, "turn-"+turn, opt)
}

// CreateAgent creates the agent and records its turn policy when one is given.
func (s *Service) CreateAgent(id string, turnCheckpoints *bool) (*store.Agent, error) {
	a, err := s.Store.CreateAgent(id)
	if err != nil {
		return nil, err
	}
	if turnCheckpoints != nil {
		if err := s.Policy.SetAgent(id, *turnCheckpoints); err != nil {
			return nil, errors.Join(err, s.Store.DeleteAgent(id))
		}
	}
	return a, nil
}

// DeleteAgent deletes an agent without sessions and forgets its policy.
func (s *Service) DeleteAgent(id string) error {
	if err := s.Store.DeleteAgent(id); err != nil {
		return err
	}
	return errors.Join(s.Policy.ForgetAgent(id), s.Runs.ForgetAgent(id))
}

// RemoveStale removes, at start-up, what deleted sessions and agents left outside the store: the
// cgroups of sessions and agents the store no longer has (a quarantined session keeps its own).
func (s *Service) RemoveStale() error {
	return s.Runs.PruneCgroups(func(agent, session string) bool {
		if session == "" {
			if _, err := s.Store.GetAgent(agent); err == nil {
				return true
			}
			for _, q := range s.Store.Quarantined() {
				if q.AgentID == agent {
					return true
				}
			}
			return false
		}
		_, err := s.Store.GetSession(agent, session)
		return err == nil
	})
}
