// Package fence records which sessions are fenced: a fenced session refuses every state-changing
// operation (process.start, checkpoint.create and .delete, session.rollback and .delete, another
// session.fence, turn.begin and .end; only process.kill, which stops what runs, is let through)
// until the control plane unfences it, and every refusal says why and where the evidence is.
// Fences are daemon state, kept outside every workspace; they survive a restart and belong to the
// agent/session id, so they outlive the session itself (package workspace enforces all of it).
package fence

import (
	"encoding/json"
	"errors"
	"fmt"
	"github.com/allox-os/allox/internal/atomicfile"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"
)

// ErrFenced is matched (errors.Is) by every *FencedError.
var ErrFenced = errors.New("session is fenced")

// Fence is one fenced session.
type Fence struct {
	AgentID   string    `json:"agent_id"`
	SessionID string    `json:"session_id"`
	Reason    string    `json:"reason"`
	Evidence  string    `json:"evidence,omitempty"` // path of the evidence set, when there is one
	Since     time.Time `json:"since"`
}

// FencedError is returned by Check for a fenced session.
type FencedError struct{ Fence Fence }

func (e *FencedError) Error() string {
	msg := fmt.Sprintf("session %s/%s is fenced since %s: %s", e.Fence.AgentID, e.Fence.SessionID,
		e.Fence.Since.UTC().Format(time.RFC3339), e.Fence.Reason)
	if e.Fence.Evidence != "" {
		msg += " (evidence: " + e.Fence.Evidence + ")"
	}
	return msg + "; the control plane must call session.unfence after reviewing it"
}

func (e *FencedError) Is(target error) bool { return target == ErrFenced }

// Registry holds the fences, persisted as one JSON file.
type Registry struct {
	path   string
	mu     sync.Mutex
	fences map[string]Fence
	now    func() time.Time
}

func key(agent, session string) string { return agent + "/" + session }

// Open loads the fences kept in stateDir.
func Open(stateDir string) (*Registry, error) {
	r := &Registry{path: filepath.Join(stateDir, "fences.json"), fences: map[string]Fence{}, now: time.Now}
	data, err := os.ReadFile(r.path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return r, nil
	case err != nil:
		return nil, fmt.Errorf("read fences: %w", err)
	}
	var list []Fence
	if err := json.Unmarshal(data, &list); err != nil {
		return nil, fmt.Errorf("decode %s: %w", r.path, err)
	}
	for _, f := range list {
		r.fences[key(f.AgentID, f.SessionID)] = f
	}
	return r, nil
}

// Fence fences a session (again: the newest reason wins).
func (r *Registry) Fence(agent, session, reason, evidence string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	prev, had := r.fences[key(agent, session)]
	r.fences[key(agent, session)] = Fence{AgentID: agent, SessionID: session, Reason: reason, Evidence: evidence, Since: r.now().UTC()}
	if err := r.save(); err != nil {
		if had {
			r.fences[key(agent, session)] = prev
		} else {
			delete(r.fences, key(agent, session))
		}
		return err
	}
	return nil
}

// Unfence lifts a fence. It reports whether the session was fenced.
func (r *Registry) Unfence(agent, session string) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	prev, had := r.fences[key(agent, session)]
	if !had {
		return false, nil
	}
	delete(r.fences, key(agent, session))
	if err := r.save(); err != nil {
		r.fences[key(agent, session)] = prev
		return false, err
	}
	return true, nil
}

// Get returns the session's fence, if it has one.
func (r *Registry) Get(agent, session string) (Fence, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f, ok := r.fences[key(agent, session)]
	return f, ok
}

// Check returns a *FencedError when the session is fenced, nil otherwise.
func (r *Registry) Check(agent, session string) error {
	if f, ok := r.Get(agent, session); ok {
		return &FencedError{Fence: f}
	}
	return nil
}

// save writes the fences atomically. Callers hold mu.
func (r *Registry) save() error {
	list := make([]Fence, 0, len(r.fences))
	for _, f := range r.fences {
		list = append(list, f)
	}
	sort.Slice(list, func(i, j int) bool {
		return key(list[i].AgentID, list[i].SessionID) < key(list[j].AgentID, list[j].SessionID)
	})
	data, err := json.MarshalIndent(list, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(r.path), 0o700); err != nil {
		return err
	}
	return atomicfile.Write(r.path, data, 0o600)
}
