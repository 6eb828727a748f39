package workspace

import (
	"encoding/json"
	"errors"
	"fmt"
	"github.com/allox-os/allox/internal/atomicfile"
	"os"
	"path/filepath"
	"sync"
)

// Policy is the Session/Turn checkpoint policy: off unless enabled — for every session by the
// daemon (SetDefault, --turn-checkpoints), or per agent and per session; a session's own setting
// wins over its agent's, and an agent's over the daemon's. The agents' and sessions' settings are
// daemon state, persisted outside every workspace; the default comes from the command line.
type Policy struct {
	path string
	mu   sync.Mutex
	st   policyState
	on   bool // the default, for an agent and session without a setting of their own
}

type policyState struct {
	Agents   map[string]bool `json:"agents"`
	Sessions map[string]bool `json:"sessions"`
	// SharedRW are the agents whose runs may write their shared/ (agent.create's "shared": "rw");
	// every other agent's shared/ is read-only in its runs.
	SharedRW map[string]bool `json:"shared_rw,omitempty"`
}

// OpenPolicy loads the policy kept in stateDir.
func OpenPolicy(stateDir string) (*Policy, error) {
	p := &Policy{path: filepath.Join(stateDir, "turn-policy.json"), st: policyState{Agents: map[string]bool{}, Sessions: map[string]bool{}, SharedRW: map[string]bool{}}}
	data, err := os.ReadFile(p.path)
	if errors.Is(err, os.ErrNotExist) {
		return p, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read turn policy: %w", err)
	}
	if err := json.Unmarshal(data, &p.st); err != nil {
		return nil, fmt.Errorf("decode %s: %w", p.path, err)
	}
	if p.st.Agents == nil {
		p.st.Agents = map[string]bool{}
	}
	if p.st.Sessions == nil {
		p.st.Sessions = map[string]bool{}
	}
	if p.st.SharedRW == nil {
		p.st.SharedRW = map[string]bool{}
	}
	return p, nil
}

// Enabled reports whether turn checkpoints are on for the session.
func (p *Policy) Enabled(agent, session string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if v, ok := p.st.Sessions[agent+"/"+session]; ok {
		return v
	}
	if v, ok := p.st.Agents[agent]; ok {
		return v
	}
	return p.on
}

// SetDefault sets the policy of every agent and session without a setting of their own
// (--turn-checkpoints); it is not persisted.
func (p *Policy) SetDefault(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.on = on
}

// ClearAgent drops the agent's own setting: its sessions without one follow the default.
func (p *Policy) ClearAgent(agent string) error {
	return p.update(func(st *policyState) { delete(st.Agents, agent) })
}

// SetAgent switches the policy for an agent's sessions that have no setting of their own.
func (p *Policy) SetAgent(agent string, on bool) error {
	return p.update(func(st *policyState) { st.Agents[agent] = on })
}

// SharedWritable reports whether the agent's runs may write its shared/.
func (p *Policy) SharedWritable(agent string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.st.SharedRW[agent]
}

// SetAgentOptions records a new agent's settings in one write: its turn policy (nil: none of its
// own) and whether its runs may write shared/.
func (p *Policy) SetAgentOptions(agent string, turnCheckpoints *bool, sharedWritable bool) error {
	return p.update(func(st *policyState) {
		if turnCheckpoints != nil {
			st.Agents[agent] = *turnCheckpoints
		}
		if sharedWritable {
			st.SharedRW[agent] = true
		}
	})
}

// SetSession switches the policy for one session.
func (p *Policy) SetSession(agent, session string, on bool) error {
	return p.update(func(st *policyState) { st.Sessions[agent+"/"+session] = on })
}

// ForgetSession drops a deleted session's setting (and a session's own setting, which then
// follows its agent's).
func (p *Policy) ForgetSession(agent, session string) error {
	return p.update(func(st *policyState) { delete(st.Sessions, agent+"/"+session) })
}

// ForgetAgent drops a deleted agent's setting.
func (p *Policy) ForgetAgent(agent string) error {
	return p.update(func(st *policyState) {
		delete(st.Agents, agent)
		delete(st.SharedRW, agent)
	})
}

func (p *Policy) update(change func(*policyState)) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	next := policyState{Agents: clone(p.st.Agents), Sessions: clone(p.st.Sessions), SharedRW: clone(p.st.SharedRW)}
	change(&next)
	data, err := json.MarshalIndent(next, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(p.path), 0o700); err != nil {
		return err
	}
	if err := atomicfile.Write(p.path, data, 0o600); err != nil {
		return fmt.Errorf("write turn policy: %w", err)
	}
	p.st = next
	return nil
}

func clone(m map[string]bool) map[string]bool {
	c := make(map[string]bool, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}
