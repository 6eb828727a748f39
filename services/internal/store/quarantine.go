package store

import (
	"errors"
	"fmt"
	"sort"
	"time"
)

// ErrQuarantined means the session is quarantined: a journaled transaction on it could not be
// finished, so the store serves everything else but refuses the session's operations (except
// session.delete, which is how it is recovered).
var ErrQuarantined = errors.New("session is quarantined")

// Quarantine says why a session is quarantined and since when.
type Quarantine struct {
	AgentID, SessionID string
	Reason             string
	Since              time.Time
	Txns               []string // the journal entries left for it
}

type quarantineRec struct {
	Reason string    `json:"reason"`
	Since  time.Time `json:"since"`
}

// quarantineHint says how to get a quarantined session back.
const quarantineHint = "delete the session with session.delete (its current/ and checkpoints are lost), " +
	"or fix the cause and restart the daemon, which retries the recovery"

// quarantineTxn quarantines t's session because finishing t failed with cause. The transaction
// stays journaled (with the reason and the time it was first quarantined) so that every start
// retries it; the session's operations are refused until then or until it is deleted.
func (s *Store) quarantineTxn(t *txn, cause error) {
	if t.Quarantined == nil {
		t.Quarantined = &quarantineRec{Since: time.Now().UTC()}
	}
	t.Quarantined.Reason = fmt.Sprintf("%s (journal %s) could not be finished: %v", t.Op, t.ID, cause)
	_ = s.journalSave(t) // best effort: the entry itself is already in the journal
	k := t.Agent + "/" + t.Session
	s.mu.Lock()
	q := s.quarantine[k]
	if q == nil {
		q = &Quarantine{AgentID: t.Agent, SessionID: t.Session, Since: t.Quarantined.Since}
		s.quarantine[k] = q
	}
	q.Reason = t.Quarantined.Reason
	if !contains(q.Txns, t.ID) {
		q.Txns = append(q.Txns, t.ID)
	}
	delete(s.pending, k)
	s.mu.Unlock()
	s.audit("quarantine", t.Agent, t.Session, t.Checkpoint, q.Reason)
}

// holdTxn adds t to its session's quarantine, if it has one, without trying it: recovery touches
// nothing else of a quarantined session. It reports whether it did.
func (s *Store) holdTxn(t *txn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.quarantine[t.Agent+"/"+t.Session]
	if q == nil {
		return false
	}
	if !contains(q.Txns, t.ID) {
		q.Txns = append(q.Txns, t.ID)
	}
	return true
}

// quarantinedLocked returns the session's quarantine, nil if it has none. The caller holds s.mu.
func (s *Store) quarantinedLocked(agentID, sessionID string) *Quarantine {
	return s.quarantine[agentID+"/"+sessionID]
}

// Quarantined returns every quarantined session, sorted by agent and session.
func (s *Store) Quarantined() []Quarantine {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Quarantine, 0, len(s.quarantine))
	for _, q := range s.quarantine {
		c := *q
		c.Txns = append([]string(nil), q.Txns...)
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].AgentID != out[j].AgentID {
			return out[i].AgentID < out[j].AgentID
		}
		return out[i].SessionID < out[j].SessionID
	})
	return out
}

func quarantinedError(op string, q *Quarantine) error {
	return &Error{Op: op, Field: "session_id", ID: q.SessionID,
		Err:  fmt.Errorf("%w since %s: %s", ErrQuarantined, q.Since.Format(time.RFC3339), q.Reason),
		Hint: quarantineHint}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
