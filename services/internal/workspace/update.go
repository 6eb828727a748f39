package workspace

import "github.com/allox-os/allox/services/internal/store"

// UpdateSession changes a session's turn checkpoint policy (agent.update's and session.update's
// turn_checkpoints): on or off, or, with turnCheckpoints nil, back to its agent's setting. A
// fenced session refuses it. Switching the policy on later makes no baseline: the next successful
// turn checkpoints from wherever the session is.
func (s *Service) UpdateSession(agent, session string, turnCheckpoints *bool) (*store.Session, error) {
	defer s.lock(agent, session)()
	sess, err := s.store.GetSession(agent, session)
	if err != nil {
		return nil, err
	}
	if err := s.fences.Check(agent, session); err != nil {
		return nil, err
	}
	if turnCheckpoints == nil {
		err = s.policy.ForgetSession(agent, session)
	} else {
		err = s.policy.SetSession(agent, session, *turnCheckpoints)
	}
	if err != nil {
		return nil, err
	}
	return sess, nil
}

// UpdateAgent changes the turn checkpoint policy of an agent's sessions that have no setting of
// their own: on or off, or, with turnCheckpoints nil, back to the daemon's default.
func (s *Service) UpdateAgent(agent string, turnCheckpoints *bool) (*store.Agent, error) {
	a, err := s.store.GetAgent(agent)
	if err != nil {
		return nil, err
	}
	if turnCheckpoints == nil {
		err = s.policy.ClearAgent(agent)
	} else {
		err = s.policy.SetAgent(agent, *turnCheckpoints)
	}
	if err != nil {
		return nil, err
	}
	return a, nil
}
