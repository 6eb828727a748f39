package workspace

import (
	"fmt"
	"time"

	"github.com/allox-os/allox/services/internal/store"
)

// turnPrefix makes a turn's checkpoint id: "turn-<turn_id>".
const turnPrefix = "turn-"

// MaxTurnIDLen is the longest turn id: its checkpoint id must fit store.MaxIDLen.
const MaxTurnIDLen = store.MaxIDLen - len(turnPrefix)

// CheckTurnID is the one rule for turn ids, for turn.begin and turn.end alike: the id must make a
// valid checkpoint id, so that every turn that may begin can also end with a checkpoint. It
// returns a *store.Error naming turn_id.
func CheckTurnID(op, id string) error {
	why := ""
	switch {
	case id == "":
		why = "is required"
	case len(id) > MaxTurnIDLen:
		why = fmt.Sprintf("is %d bytes long, must be at most %d", len(id), MaxTurnIDLen)
	}
	for i := 0; why == "" && i < len(id); i++ {
		c := id[i]
		lowerOrDigit := c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
		switch {
		case i == 0 && !lowerOrDigit:
			why = fmt.Sprintf("must start with a lower-case letter or digit, not %q", c)
		case !lowerOrDigit && c != '.' && c != '_' && c != '-':
			why = fmt.Sprintf("has %q at byte %d; use only a-z, 0-9, '.', '_' and '-'", c, i)
		}
	}
	if why == "" {
		return nil
	}
	return &store.Error{Op: op, Field: "turn_id", ID: id, Err: store.ErrInvalidID,
		Hint: fmt.Sprintf("turn_id %s (pattern [a-z0-9][a-z0-9._-]{0,%d}, e.g. \"1\" or \"turn-7\"; the turn's checkpoint is \"turn-<turn_id>\")", why, MaxTurnIDLen-1)}
}

// BeginTurn records the start of an agent turn (the Session/Turn lifecycle event) in the session's
// history: the id must be one that EndTurn accepts and that the session has not used, the labels
// within the checkpoint labels' bounds, the session must exist and must not be fenced. Nothing is
// checkpointed until the turn ends.
func (s *Service) BeginTurn(agent, session, turn string, labels map[string]string) (*store.Session, Turn, error) {
	if err := CheckTurnID("turn.begin", turn); err != nil {
		return nil, Turn{}, err
	}
	if err := store.CheckLabels("turn.begin", labels); err != nil {
		return nil, Turn{}, err
	}
	sess, err := s.store.GetSession(agent, session)
	if err != nil {
		return nil, Turn{}, err
	}
	if err := s.fences.Check(agent, session); err != nil {
		return nil, Turn{}, err
	}
	if s.turns == nil {
		return sess, Turn{TurnID: turn, Labels: labels, Outcome: TurnOpen}, nil
	}
	now := time.Now().UTC()
	t := Turn{TurnID: turn, Labels: labels, Begun: &now, Outcome: TurnOpen}
	err = s.turns.change(agent, session, turn, func(prev *Turn) (*Turn, error) {
		if prev != nil {
			return nil, &store.Error{Op: "turn.begin", Field: "turn_id", ID: turn, Err: store.ErrExists,
				Hint: fmt.Sprintf("session %s/%s already had turn %q (%s): give every turn a new id, e.g. a counter", agent, session, turn, prev.Outcome)}
		}
		return &t, nil
	})
	if err != nil {
		return nil, Turn{}, err
	}
	return sess, t, nil
}

// EndTurn records the end of an agent turn in the session's history; after a successful turn,
// with the policy on, the session is checkpointed as "turn-<turn_id>". It returns the turn and its
// checkpoint, or nil when none was made. A fenced session refuses it either way, and so does a turn
// that has ended already; a turn.end without a turn.begin is recorded with no begin time.
func (s *Service) EndTurn(agent, session, turn string, success bool) (Turn, *store.Checkpoint, error) {
	if err := CheckTurnID("turn.end", turn); err != nil {
		return Turn{}, nil, err
	}
	if _, err := s.store.GetSession(agent, session); err != nil {
		return Turn{}, nil, err
	}
	if err := s.fences.Check(agent, session); err != nil {
		return Turn{}, nil, err
	}
	var t Turn
	if s.turns != nil {
		prev, ok := s.turns.get(agent, session, turn)
		if ok && prev.Outcome != TurnOpen {
			return Turn{}, nil, &store.Error{Op: "turn.end", Field: "turn_id", ID: turn, Err: store.ErrConflict,
				Hint: fmt.Sprintf("turn %q of session %s/%s has ended already (%s); end each turn once", turn, agent, session, prev.Outcome)}
		}
		if ok {
			t = prev
		}
	}
	t.TurnID, t.Outcome = turn, TurnFailed
	if success {
		t.Outcome = TurnSucceeded
	}
	var cp *store.Checkpoint
	if success && s.policy.Enabled(agent, session) {
		opt := store.CheckpointOptions{Labels: map[string]string{"allox.kind": "turn", "allox.turn": turn}}
		var err error
		if cp, err = s.CreateCheckpoint(agent, session, turnPrefix+turn, opt); err != nil {
			return Turn{}, nil, err
		}
		t.Checkpoint = cp.ID
	}
	now := time.Now().UTC()
	t.Ended = &now
	if s.turns != nil {
		if err := s.turns.change(agent, session, turn, func(*Turn) (*Turn, error) { return &t, nil }); err != nil {
			return Turn{}, cp, err
		}
	}
	return t, cp, nil
}

// Turns is the session's turn history, oldest first.
func (s *Service) Turns(agent, session string) ([]Turn, error) {
	if _, err := s.store.GetSession(agent, session); err != nil {
		return nil, err
	}
	if s.turns == nil {
		return nil, nil
	}
	return s.turns.List(agent, session)
}

// OpenTurn is the session's most recently begun turn that has not ended; ok is false when none is
// (or the daemon keeps no history).
func (s *Service) OpenTurn(agent, session string) (Turn, bool) {
	if s.turns == nil {
		return Turn{}, false
	}
	return s.turns.Open(agent, session)
}
