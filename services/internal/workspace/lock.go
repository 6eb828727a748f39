package workspace

import (
	"errors"
	"fmt"
	"sync"
)

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
	leases   int  // Lease holders (share transfers); Rollback waits for them
	rolling  bool // a Rollback is in progress: Lease refuses
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

// ErrSessionBusy is Lease's refusal: a rollback of the session is in progress.
var ErrSessionBusy = errors.New("a rollback of the session is in progress")

// Lease takes a shared, non-blocking lease on the session for an access to its files from
// outside its runs (the session-share plugin's reads and writes): it never waits, and it is
// refused with ErrSessionBusy while a Rollback of the session is in progress. A Rollback that
// starts while leases are held waits for their release before it changes current/ (the lease
// is not the session's lock: other changes — runs, checkpoints — go on beside it, and several
// leases are held at once). It returns the release, which must be called once.
func (s *Service) Lease(agent, session string) (func(), error) {
	l := s.sessionLock(agent, session)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.rolling {
		return nil, fmt.Errorf("session %s/%s: %w", agent, session, ErrSessionBusy)
	}
	l.leases++
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			l.leases--
			l.changed.Broadcast()
			l.mu.Unlock()
		})
	}, nil
}

// rolling marks a Rollback in progress (the caller holds the session's lock): new leases are
// refused, and it waits for the held ones' release. It returns the mark's end.
func (s *Service) rollingBack(agent, session string) func() {
	l := s.sessionLock(agent, session)
	l.mu.Lock()
	l.rolling = true
	for l.leases > 0 {
		l.changed.Wait()
	}
	l.mu.Unlock()
	return func() {
		l.mu.Lock()
		l.rolling = false
		l.changed.Broadcast()
		l.mu.Unlock()
	}
}
