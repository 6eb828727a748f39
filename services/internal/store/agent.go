package store

import (
	"fmt"
	"os"
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

// CreateAgent creates the agent's workspace with an empty shared/ and sessions/.
func (s *Store) CreateAgent(id string) (*Agent, error) {
	const op = "agent.create"
	if err := checkID(op, "agent_id", id); err != nil {
		return nil, err
	}
	s.ops.RLock()
	defer s.ops.RUnlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ix.Agents[id] != nil {
		return nil, exists(op, "agent_id", id)
	}
	for _, d := range []string{"/shared", "/sessions"} {
		if err := mkdirAll(s.fd(), workspaceRel(id)+d); err != nil {
			return nil, fmt.Errorf("%s: %w", op, err)
		}
	}
	if _, err := s.agentQgroup(id, false); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	rec := &agentRec{Created: time.Now().UTC(), Sessions: map[string]*sessionRec{}}
	if err := s.update(func(ix *index) error { ix.Agents[id] = rec; return nil }); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	s.audit(op, id, "", "", "")
	return s.agent(id, rec), nil
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
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.ix.Agents[id]
	if r == nil {
		return agentNotFound(op, id)
	}
	if n := len(r.Sessions); n > 0 {
		return &Error{Op: op, Field: "agent_id", ID: id, Err: ErrConflict,
			Hint: fmt.Sprintf("the agent has %d session(s); delete them with session.delete first", n)}
	}
	// Move the tree out of the way atomically, then forget the agent, then remove the tree.
	agents, err := openDir(s.fd(), "agents")
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	defer agents.Close()
	trash := ".deleted-" + id + "-" + s.newTxnIDLocked()
	if err := unix.Renameat(int(agents.Fd()), id, int(agents.Fd()), trash); err != nil {
		return fmt.Errorf("%s: move aside: %w", op, err)
	}
	if err := s.update(func(ix *index) error { delete(ix.Agents, id); return nil }); err != nil {
		unix.Renameat(int(agents.Fd()), trash, int(agents.Fd()), id)
		return fmt.Errorf("%s: %w", op, err)
	}
	// os.RemoveAll never follows symlinks; a leftover .deleted-* tree is removed at next Open.
	os.RemoveAll(s.abs("agents/" + trash))
	s.audit(op, id, "", "", "")
	s.quotaForget(id, "")
	return nil
}

func (s *Store) newTxnIDLocked() string {
	s.seq++
	return fmt.Sprintf("%x-%x", time.Now().UnixNano(), s.seq)
}
