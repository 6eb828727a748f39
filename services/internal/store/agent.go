package store

import (
	"errors"
	"fmt"
	"sort"
	"time"

	"golang.org/x/sys/unix"
)

// Agent is a first-level workspace.
type Agent struct {
	ID        string
	Created   time.Time
	Workspace string // <root>/agents/<id>/workspace
	Shared    string // <root>/agents/<id>/workspace/shared
}

func (s *Store) agent(id string, r *agentRec) *Agent {
	ws := s.abs(workspaceRel(id))
	return &Agent{ID: id, Created: r.Created, Workspace: ws, Shared: ws + "/shared"}
}

func agentNotFound(op, id string) error {
	return notFound(op, "agent_id", id, "create it with agent.create or list agents with agent.list")
}

// CreateAgent creates the agent's workspace with an empty shared/ and sessions/. It is
// journaled: a create that fails or is killed before the agent reaches the index leaves no
// directory behind (recovery removes it).
func (s *Store) CreateAgent(id string) (*Agent, error) {
	const op = "agent.create"
	if err := checkID(op, "agent_id", id); err != nil {
		return nil, err
	}
	unlock, err := s.lockSession(op, id, "") // serialises creates of one agent id
	if err != nil {
		return nil, err
	}
	defer unlock()
	s.mu.Lock()
	err = nil
	switch {
	case s.ix.Agents[id] != nil:
		err = exists(op, "agent_id", id)
	case s.hasQuarantineLocked(id):
		err = &Error{Op: op, Field: "agent_id", ID: id, Err: ErrConflict,
			Hint: "a quarantined session of an agent of that id is left; delete it with session.delete first (system.info lists it)"}
	}
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	t := s.newTxn(opCreateAgent, id, "")
	abort := func(err error) error {
		var c *crash
		if !errors.As(err, &c) {
			if rerr := s.removeAgentTree(id); rerr != nil {
				return fmt.Errorf("%s: %w (removing what it made: %w; removed at next start)", op, err, rerr)
			}
			_ = s.journalRemove(t)
		}
		return fmt.Errorf("%s: %w", op, err)
	}
	if err := s.step(t, stepAgentDirs); err != nil {
		return nil, abort(err)
	}
	if err := mkdirAll(s.fd(), workspaceRel(id)+"/sessions"); err != nil {
		return nil, abort(err)
	}
	ws, err := openDir(s.fd(), workspaceRel(id))
	if err != nil {
		return nil, abort(err)
	}
	defer ws.Close()
	if err := makeSubvolDir(int(ws.Fd()), sharedDir, sharedMode); err != nil { // quota_dirs.go
		return nil, abort(err)
	}
	if err := s.step(t, stepAgentIndex); err != nil {
		return nil, abort(err)
	}
	if err := s.quotaAssignAgent(id, int(ws.Fd()), sharedDir); err != nil {
		return nil, abort(err)
	}
	rec := &agentRec{Created: time.Now().UTC(), Sessions: map[string]*sessionRec{}}
	s.mu.Lock()
	err = s.update(id, "", func(ix *index) error { ix.Agents[id] = rec; return nil })
	s.mu.Unlock()
	if err != nil {
		return nil, abort(err)
	}
	if err := s.journalRemove(t); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	s.audit(op, id, "", "", "")
	return s.agent(id, rec), nil
}

// recoverCreateAgent removes the tree of an agent that did not reach the index.
func (s *Store) recoverCreateAgent(t *txn) error {
	s.mu.Lock()
	done := s.ix.Agents[t.Agent] != nil
	s.mu.Unlock()
	if done {
		return nil
	}
	return s.removeAgentTree(t.Agent)
}

// removeAgentTree removes agents/<id> (subvolumes in it included).
func (s *Store) removeAgentTree(id string) error {
	agents, err := openDir(s.fd(), "agents")
	if err != nil {
		return err
	}
	defer agents.Close()
	return s.removeAll(int(agents.Fd()), id, agentRel(id))
}

func (s *Store) hasQuarantineLocked(agentID string) bool {
	for _, q := range s.quarantine {
		if q.AgentID == agentID {
			return true
		}
	}
	return false
}

// GetAgent returns the agent id.
func (s *Store) GetAgent(id string) (*Agent, error) {
	if err := checkID("agent.get", "agent_id", id); err != nil {
		return nil, err
	}
	s.ops.RLock()
	defer s.ops.RUnlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.ix.Agents[id]
	if r == nil {
		return nil, agentNotFound("agent.get", id)
	}
	return s.agent(id, r), nil
}

// ListAgents returns all agents sorted by id.
func (s *Store) ListAgents() ([]*Agent, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*Agent, 0, len(s.ix.Agents))
	for id, r := range s.ix.Agents {
		out = append(out, s.agent(id, r))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// DeleteAgent deletes the agent and its shared files. It refuses while the agent has sessions.
func (s *Store) DeleteAgent(id string) error {
	const op = "agent.delete"
	if err := checkID(op, "agent_id", id); err != nil {
		return err
	}
	trash, err := s.forgetAgent(op, id)
	if err != nil {
		return err
	}
	// Nothing is followed, nested subvolumes (in shared/) are deleted; a leftover .deleted-* tree
	// is removed at next Open.
	if agents, err := openDir(s.fd(), "agents"); err == nil {
		_ = s.removeAll(int(agents.Fd()), trash, "agents/"+trash)
		agents.Close()
	}
	s.audit(op, id, "", "", "")
	s.quotaForget(id, "")
	return nil
}

// forgetAgent moves the agent's tree aside atomically and then forgets the agent; it returns the
// name the tree now has in agents/.
func (s *Store) forgetAgent(op, id string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.ix.Agents[id]
	if r == nil {
		return "", agentNotFound(op, id)
	}
	if s.hasQuarantineLocked(id) {
		return "", &Error{Op: op, Field: "agent_id", ID: id, Err: ErrConflict,
			Hint: "the agent has a quarantined session; delete it with session.delete first (system.info lists it)"}
	}
	if n := len(r.Sessions); n > 0 {
		return "", &Error{Op: op, Field: "agent_id", ID: id, Err: ErrConflict,
			Hint: fmt.Sprintf("the agent has %d session(s); delete them with session.delete first", n)}
	}
	agents, err := openDir(s.fd(), "agents")
	if err != nil {
		return "", fmt.Errorf("%s: %w", op, err)
	}
	defer agents.Close()
	trash := ".deleted-" + id + "-" + s.newTxnIDLocked()
	if err := unix.Renameat(int(agents.Fd()), id, int(agents.Fd()), trash); err != nil {
		return "", fmt.Errorf("%s: move aside: %w", op, err)
	}
	if err := s.update(id, "", func(ix *index) error { delete(ix.Agents, id); return nil }); err != nil {
		var c *crash
		if !errors.As(err, &c) { // after a crash the tree stays aside, removed at the next Open
			unix.Renameat(int(agents.Fd()), trash, int(agents.Fd()), id)
		}
		return "", fmt.Errorf("%s: %w", op, err)
	}
	return trash, nil
}

func (s *Store) newTxnIDLocked() string {
	s.seq++
	return fmt.Sprintf("%x-%x", time.Now().UnixNano(), s.seq)
}
