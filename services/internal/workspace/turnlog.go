package workspace

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// MaxTurns is how many turns a session's history keeps; beyond it the oldest are dropped when the
// history is next rewritten.
const MaxTurns = 4096

// Turn is one agent turn as the session's history records it (turn.begin, turn.end).
type Turn struct {
	TurnID string            `json:"turn_id"`
	Labels map[string]string `json:"labels,omitempty"`
	Begun  *time.Time        `json:"begun,omitempty"` // nil: turn.end came without a turn.begin
	Ended  *time.Time        `json:"ended,omitempty"` // nil: the turn is open
	// Outcome is "open", "succeeded" or "failed".
	Outcome string `json:"outcome"`
	// Checkpoint is the turn's checkpoint ("turn-<id>"), when the policy made one.
	Checkpoint string `json:"checkpoint,omitempty"`
}

// Turn outcomes.
const (
	TurnOpen      = "open"
	TurnSucceeded = "succeeded"
	TurnFailed    = "failed"
)

// TurnLog is every session's turn history: one JSON Lines file per session under
// <state>/turns/<agent>/<session>.jsonl, outside every workspace, appended one record per event
// (a turn's record again at its end; the last record of an id wins).
type TurnLog struct {
	dir string
	mu  sync.Mutex
	// cache holds the sessions read so far, by "agent/session", in order of first record.
	cache map[string]*turnHistory
}

type turnHistory struct {
	order []string
	turns map[string]*Turn
}

// OpenTurnLog opens the turn histories kept under stateDir.
func OpenTurnLog(stateDir string) (*TurnLog, error) {
	dir := filepath.Join(stateDir, "turns")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("turn log: %w", err)
	}
	return &TurnLog{dir: dir, cache: map[string]*turnHistory{}}, nil
}

func (l *TurnLog) path(agent, session string) string {
	return filepath.Join(l.dir, agent, session+".jsonl")
}

// load returns a session's history, reading it once (l.mu held).
func (l *TurnLog) load(agent, session string) (*turnHistory, error) {
	k := agent + "/" + session
	if h, ok := l.cache[k]; ok {
		return h, nil
	}
	h := &turnHistory{turns: map[string]*Turn{}}
	f, err := os.Open(l.path(agent, session))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("turn log: %w", err)
	}
	if err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			var t Turn
			if json.Unmarshal(sc.Bytes(), &t) != nil || t.TurnID == "" {
				continue // a torn last line after a crash
			}
			h.put(&t)
		}
	}
	l.cache[k] = h
	return h, nil
}

func (h *turnHistory) put(t *Turn) {
	if _, ok := h.turns[t.TurnID]; !ok {
		h.order = append(h.order, t.TurnID)
	}
	h.turns[t.TurnID] = t
}

// record appends t to the session's history (l.mu held).
func (l *TurnLog) record(agent, session string, h *turnHistory, t *Turn) error {
	line, err := json.Marshal(t)
	if err != nil {
		return err
	}
	p := l.path(agent, session)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return fmt.Errorf("turn log: %w", err)
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("turn log: %w", err)
	}
	_, werr := f.Write(append(line, '\n'))
	if err := errors.Join(werr, f.Close()); err != nil {
		return fmt.Errorf("turn log: %w", err)
	}
	h.put(t)
	if len(h.order) > MaxTurns {
		return l.compact(agent, session, h)
	}
	return nil
}

// compact rewrites the history with its newest MaxTurns turns, one line each.
func (l *TurnLog) compact(agent, session string, h *turnHistory) error {
	drop := h.order[:len(h.order)-MaxTurns]
	for _, id := range drop {
		delete(h.turns, id)
	}
	h.order = append([]string(nil), h.order[len(drop):]...)
	var buf []byte
	for _, id := range h.order {
		line, err := json.Marshal(h.turns[id])
		if err != nil {
			return err
		}
		buf = append(append(buf, line...), '\n')
	}
	tmp := l.path(agent, session) + ".tmp"
	if err := os.WriteFile(tmp, buf, 0o600); err != nil {
		return fmt.Errorf("turn log: %w", err)
	}
	return os.Rename(tmp, l.path(agent, session))
}

// get returns one turn of a session's history.
func (l *TurnLog) get(agent, session, id string) (Turn, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	h, err := l.load(agent, session)
	if err != nil {
		return Turn{}, false
	}
	t, ok := h.turns[id]
	if !ok {
		return Turn{}, false
	}
	return *t, true
}

// change records what f makes of the session's turn id (prev nil: the session has none of that
// id), under the log's lock; an error from f records nothing.
func (l *TurnLog) change(agent, session, id string, f func(prev *Turn) (*Turn, error)) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	h, err := l.load(agent, session)
	if err != nil {
		return err
	}
	var prev *Turn
	if t, ok := h.turns[id]; ok {
		c := *t
		prev = &c
	}
	next, err := f(prev)
	if err != nil {
		return err
	}
	return l.record(agent, session, h, next)
}

// List returns a session's turns, oldest first.
func (l *TurnLog) List(agent, session string) ([]Turn, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	h, err := l.load(agent, session)
	if err != nil {
		return nil, err
	}
	out := make([]Turn, 0, len(h.order))
	for _, id := range h.order {
		out = append(out, *h.turns[id])
	}
	return out, nil
}

// Open returns the session's most recently begun turn that is still open; ok is false when none is.
func (l *TurnLog) Open(agent, session string) (t Turn, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	h, err := l.load(agent, session)
	if err != nil {
		return Turn{}, false
	}
	for i := len(h.order) - 1; i >= 0; i-- {
		if tt := h.turns[h.order[i]]; tt.Outcome == TurnOpen {
			return *tt, true
		}
	}
	return Turn{}, false
}

// Forget drops a deleted session's history.
func (l *TurnLog) Forget(agent, session string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.cache, agent+"/"+session)
	if err := os.Remove(l.path(agent, session)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("turn log: %w", err)
	}
	return nil
}
