package workspace

// KillRun kills a run's whole cgroup (a run that has ended already: a no-op), under its session's
// lock.
func (s *Service) KillRun(runID string) error {
	st, err := s.runs.Get(runID)
	if err != nil {
		return err
	}
	defer s.lock(st.AgentID, st.SessionID)()
	return s.runs.Kill(runID)
}

// The run-lifecycle changes below are for a run's observer (Begin, End, its death). They take the
// session's lock or, when the operation that holds it waits on the session's runs (StartProcess,
// Rollback killing the runs), share it: see sessionLock.

// FenceFault fences the session of a run for a fault its lifecycle found, with the evidence's
// path (the newest reason wins over an earlier fence).
func (s *Service) FenceFault(agent, session, reason, evidence string) error {
	defer s.borrow(agent, session)()
	return s.fences.Fence(agent, session, reason, evidence)
}

// AbortRun kills one of the session's runs from its lifecycle (its observer died).
func (s *Service) AbortRun(agent, session, runID string) error {
	defer s.borrow(agent, session)()
	return s.runs.Kill(runID)
}

// HandoverSession lends the store to another process for fn (see store.Store.Handover), which
// changes the session's state (a recovery restores it) during its run's end.
func (s *Service) HandoverSession(agent, session string, fn func() error) error {
	defer s.borrow(agent, session)()
	return s.store.Handover(fn)
}
