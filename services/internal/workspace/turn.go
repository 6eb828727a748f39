package workspace

import (
	"fmt"

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

// BeginTurn acknowledges the start of an agent turn (the Session/Turn lifecycle event): the id
// must be one that EndTurn accepts, the session must exist and must not be fenced. Nothing is
// checkpointed until the turn ends.
func (s *Service) BeginTurn(agent, session, turn string) (*store.Session, error) {
	if err := CheckTurnID("turn.begin", turn); err != nil {
		return nil, err
	}
	sess, err := s.store.GetSession(agent, session)
	if err != nil {
		return nil, err
	}
	if err := s.fences.Check(agent, session); err != nil {
		return nil, err
	}
	return sess, nil
}

// EndTurn records the end of an agent turn; after a successful turn, with the policy on, the session
// is checkpointed as "turn-<turn_id>". It returns the checkpoint, or nil when none was made. A
// fenced session refuses it either way.
func (s *Service) EndTurn(agent, session, turn string, success bool) (*store.Checkpoint, error) {
	if err := CheckTurnID("turn.end", turn); err != nil {
		return nil, err
	}
	if _, err := s.store.GetSession(agent, session); err != nil {
		return nil, err
	}
	if err := s.fences.Check(agent, session); err != nil {
		return nil, err
	}
	if !success || !s.policy.Enabled(agent, session) {
		return nil, nil
	}
	opt := store.CheckpointOptions{Labels: map[string]string{"allox.kind": "turn", "allox.turn": turn}}
	return s.CreateCheckpoint(agent, session, turnPrefix+turn, opt)
}
