package lease

import "sync"

// Ledger makes intents idempotent by id: the first Do of an id runs it, every later Do of the same
// id (also one arriving while the first still runs) gets the first's outcome without running
// anything. It remembers the last max ids.
type Ledger[R any] struct {
	mu    sync.Mutex
	max   int
	order []string
	done  map[string]*entry[R]
}

type entry[R any] struct {
	ready chan struct{}
	res   R
	err   error
}

// NewLedger remembers up to max intent ids.
func NewLedger[R any](max int) *Ledger[R] {
	return &Ledger[R]{max: max, done: map[string]*entry[R]{}}
}

// Do runs fn for id once. dup says the outcome is an earlier run's.
func (l *Ledger[R]) Do(id string, fn func() (R, error)) (res R, err error, dup bool) {
	l.mu.Lock()
	if e, ok := l.done[id]; ok {
		l.mu.Unlock()
		<-e.ready
		return e.res, e.err, true
	}
	e := &entry[R]{ready: make(chan struct{})}
	l.done[id] = e
	l.order = append(l.order, id)
	if len(l.order) > l.max {
		delete(l.done, l.order[0])
		l.order = l.order[1:]
	}
	l.mu.Unlock()
	e.res, e.err = fn()
	close(e.ready)
	return e.res, e.err, false
}
