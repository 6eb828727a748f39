package workspace

import "sync"

// sessionLock serializes a session's state changes: one at a time. Its holder may lend it to the
// lifecycle of the session's runs while it waits on them — StartProcess while a run starts (its
// observer's Begin), Rollback while it kills the session's runs and waits for their end (their
// observer's End) — because that lifecycle changes the session too (it fences it, kills the run,
// hands the store over for a recovery) and would otherwise wait for a holder that waits for it.
// Only borrow (the run-lifecycle methods) uses a lent lock; every other caller still waits.
type sessionLock struct {
	mu       sync.Mutex
	changed  *sync.Cond // on mu: held, lent or borrowed changed
	held     bool
	lent     bool
	borrowed int
}

func newSessionLock() *sessionLock {
	l := &sessionLock{}
	l.changed = sync.NewCond(&l.mu)
	return l
}

func (s *Service) sessionLock(agent, session string) *sessionLock {
	if l, ok := s.locks.Load(agent + "/" + session); ok {
		return l.(*sessionLock)
	}
	l, _ := s.locks.LoadOrStore(agent+"/"+session, newSessionLock())
	return l.(*sessionLock)
}

// lock takes the session's lock and returns its release.
func (s *Service) lock(agent, session string) func() {
	l := s.sessionLock(agent, session)
	l.mu.Lock()
	for l.held {
		l.changed.Wait()
	}
	l.held = true
	l.mu.Unlock()
	return l.release
}

func (l *sessionLock) release() {
	l.mu.Lock()
	l.held = false
	l.changed.Broadcast()
	l.mu.Unlock()
}

// lend runs fn, which waits on the session's runs, with the session's lock (which the caller
// holds) lent to their lifecycle; it returns once no borrower is left.
func (s *Service) lend(agent, session string, fn func() error) error {
	l := s.sessionLock(agent, session)
	l.mu.Lock()
	if !l.held {
		l.mu.Unlock()
		panic("BUG: workspace: lend without holding the session's lock")
	}
	l.lent = true
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		l.lent = false
		for l.borrowed > 0 {
			l.changed.Wait()
		}
		l.mu.Unlock()
	}()
	return fn()
}

// borrow is lock for a run's lifecycle: it takes the session's lock, or, while the holder lends
// it, shares the holder's. It returns the release.
func (s *Service) borrow(agent, session string) func() {
	l := s.sessionLock(agent, session)
	l.mu.Lock()
	defer l.mu.Unlock()
	for l.held && !l.lent {
		l.changed.Wait()
	}
	if !l.held {
		l.held = true
		return l.release
	}
	l.borrowed++
	return func() {
		l.mu.Lock()
		l.borrowed--
		l.changed.Broadcast()
		l.mu.Unlock()
	}
}
