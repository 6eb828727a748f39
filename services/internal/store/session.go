package store

import (
	"errors"
	"fmt"
	"sort"
	"time"
)

// Session is a second-level workspace: one Btrfs subvolume, current/, and its checkpoints.
type Session struct {
	AgentID, ID string
	Created     time.Time
	Current     string // path of current/
	Head        string // checkpoint current/ was last restored from or checkpointed at; "" none
	// Quarantine is set when the session is quarantined: its operations other than
	// session.delete are refused (ErrQuarantined).
	Quarantine *Quarantine
}

// session builds a Session; r is nil for a quarantined session the index does not hold. The
// caller holds s.mu.
func (s *Store) session(agentID, id string, r *sessionRec) *Session {
	out := &Session{AgentID: agentID, ID: id, Current: s.abs(sessionRel(agentID, id) + "/current")}
	if r != nil {
		out.Created, out.Head = r.Created, r.Head
	}
	if q := s.quarantinedLocked(agentID, id); q != nil {
		c := *q
		c.Txns = append([]string(nil), q.Txns...)
		out.Quarantine = &c
	}
	return out
}

// findSession checks both ids and returns the session record. The caller holds s.mu.
func (s *Store) findSession(op, agentID, id string) (*sessionRec, error) {
	if err := checkID(op, "agent_id", agentID); err != nil {
		return nil, err
	}
	if err := checkID(op, "session_id", id); err != nil {
		return nil, err
	}
	a := s.ix.Agents[agentID]
	if a == nil {
		return nil, agentNotFound(op, agentID)
	}
	r := a.Sessions[id]
	if r == nil {
		return nil, notFound(op, "session_id", id, "create it with session.create or list the agent's sessions with session.list")
	}
	return r, nil
}

// CreateSession creates the session's current/ subvolume and its empty checkpoints/.
// It is journaled; recovery removes a session that did not reach the index.
func (s *Store) CreateSession(agentID, id string) (*Session, error) {
	return s.CreateSessionWith(agentID, id, SessionOptions{})
}

// SessionOptions are the optional parts of a session.
type SessionOptions struct {
	// Quota is the session's space limit in bytes with quotas on (EnableQuota); 0: the default.
	Quota int64
}

// CreateSessionWith is CreateSession with options.
func (s *Store) CreateSessionWith(agentID, id string, opt SessionOptions) (*Session, error) {
	const op = "session.create"
	if err := s.checkNewSession(op, agentID, id); err != nil {
		return nil, err
	}
	unlock, err := s.lockSession(op, agentID, id)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := s.checkNewSession(op, agentID, id); err != nil {
		return nil, err
	}
	rel := sessionRel(agentID, id)
	if ok, _ := existsAt(s.fd(), rel); ok {
		return nil, &Error{Op: op, Field: "session_id", ID: id, Err: ErrConflict,
			Hint: "a directory of that name exists but is not a session; pick another session_id"}
	}
	t := s.newTxn(opCreateSession, agentID, id)
	if err := s.step(t, stepSessSubvol); err != nil {
		return nil, s.abort(t, op, err)
	}
	if err := s.makeSessionTree(rel); err != nil {
		return nil, s.abort(t, op, err)
	}
	if err := s.quotaAssignNew(agentID, id, opt.Quota); err != nil {
		return nil, s.abort(t, op, err)
	}
	if err := s.step(t, stepSessIndex); err != nil {
		return nil, s.abort(t, op, err)
	}
	rec := &sessionRec{Created: time.Now().UTC(), Checkpoints: map[string]*cpRec{}}
	s.mu.Lock()
	err = s.update(agentID, id, func(ix *index) error {
		a := ix.Agents[agentID]
		if a == nil {
			return agentNotFound(op, agentID)
		}
		a.Sessions[id] = rec
		return nil
	})
	s.mu.Unlock()
	if err != nil {
		return nil, s.abort(t, op, err)
	}
	if err := s.journalRemove(t); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	s.audit(op, agentID, id, "", s.quotaDetail(agentID, id))
	return s.session(agentID, id, rec), nil
}

// checkNewSession checks the ids, that the agent exists and that the session does not.
func (s *Store) checkNewSession(op, agentID, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, err := s.findSession(op, agentID, id)
	if err == nil {
		return exists(op, "session_id", id)
	}
	var e *Error
	if errors.As(err, &e) && e.Field == "session_id" && errors.Is(err, ErrNotFound) {
		return nil
	}
	return err
}

func (s *Store) makeSessionTree(rel string) error {
	if err := mkdirAll(s.fd(), rel+"/checkpoints"); err != nil {
		return err
	}
	dir, err := openDir(s.fd(), rel)
	if err != nil {
		return err
	}
	defer dir.Close()
	if err := subvolCreate(int(dir.Fd()), "current"); err != nil {
		return err
	}
	return makeSubvolDir(int(dir.Fd()), RunTmpDir, runTmpMode) // quota_dirs.go
}

// GetSession returns one session, a quarantined one too (even one the index does not hold).
func (s *Store) GetSession(agentID, id string) (*Session, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.findSession("session.get", agentID, id)
	if err != nil && !(errors.Is(err, ErrNotFound) && s.quarantinedLocked(agentID, id) != nil) {
		return nil, err
	}
	return s.session(agentID, id, r), nil
}

// ListSessions returns the agent's sessions sorted by id.
func (s *Store) ListSessions(agentID string) ([]*Session, error) {
	const op = "session.list"
	if err := checkID(op, "agent_id", agentID); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.ix.Agents[agentID]
	if a == nil {
		return nil, agentNotFound(op, agentID)
	}
	out := make([]*Session, 0, len(a.Sessions))
	for id, r := range a.Sessions {
		out = append(out, s.session(agentID, id, r))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// SessionPaths returns the paths a run of the session needs: its current/, the agent's shared/
// and the agent's workspace. A quarantined session is refused (ErrQuarantined).
func (s *Store) SessionPaths(agentID, sessionID string) (current, shared, agentWorkspace string, err error) {
	p, err := s.RunPaths(agentID, sessionID)
	return p.Current, p.Shared, p.AgentWorkspace, err
}

// Paths are the host paths a run of a session needs.
type Paths struct {
	Current        string // the session's current/
	Shared         string // the agent's shared/
	AgentWorkspace string // the agent's workspace/
	// RunTmp is where the runs' private /tmp are staged: <session dir>/.run-tmp, a subvolume
	// in the session's qgroup beside current/ (so in no checkpoint, on the same filesystem, and
	// outside the state directory). The session's deletion removes it; every start empties it.
	RunTmp string
}

// RunPaths returns the session's Paths. A quarantined session is refused (ErrQuarantined).
// A session made before .run-tmp was a subvolume gets one here, while it is empty.
func (s *Store) RunPaths(agentID, sessionID string) (Paths, error) {
	const op = "session.paths"
	s.mu.Lock()
	_, err := s.findSession(op, agentID, sessionID)
	if q := s.quarantinedLocked(agentID, sessionID); err == nil && q != nil {
		err = quarantinedError(op, q)
	}
	s.mu.Unlock()
	if err != nil {
		return Paths{}, err
	}
	if err := s.ensureRunTmp(agentID, sessionID); err != nil {
		return Paths{}, fmt.Errorf("%s: %s: %w", op, RunTmpDir, err)
	}
	ws, dir := s.abs(workspaceRel(agentID)), s.abs(sessionRel(agentID, sessionID))
	return Paths{Current: dir + "/current", Shared: ws + "/shared", AgentWorkspace: ws, RunTmp: dir + "/" + RunTmpDir}, nil
}
