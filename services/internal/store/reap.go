package store

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// DeleteMode says when a rollback deletes the old current/ it displaced (the last step,
// rollback.delete-old). Deleting a subvolume is quick only while few of its inodes are cached:
// the kernel evicts every cached inode of the subvolume before the ioctl returns, about 20 ms for
// a workspace of 10,000 files just read by a capture or a build.
type DeleteMode int

const (
	// DeleteNow deletes it before the rollback returns (the default).
	DeleteNow DeleteMode = iota
	// DeleteInBackground has a goroutine of the store delete it after the rollback returns, at
	// the lowest CPU priority; so are the deletions a Handover's reload finds journaled.
	DeleteInBackground
	// DeleteLater leaves it journaled for the next store to open or reload the state (the
	// daemon, after a Handover): for a program that borrows the store for one rollback.
	DeleteLater
)

// reapDelay is how long the reaper leaves an old copy before deleting it: long enough for what
// follows a rollback to finish first (the observer's capture C of the restored workspace and its
// verification take about 100 ms at 10,000 files) without competing with the eviction.
const reapDelay = 500 * time.Millisecond

// reaper deletes, in the background, the old copies that rollbacks left journaled at their
// delete-old step, each reapDelay after it was queued.
type reaper struct {
	mu      sync.Mutex
	cond    *sync.Cond
	queue   []queued
	queued  map[string]bool // "agent/session/.rollback-<txn>" of the queued and the one in progress
	busy    bool
	stopped bool
	stop    chan struct{} // closed by stopReaper
	done    chan struct{} // closed when the goroutine has ended
}

type queued struct {
	t    *txn
	when time.Time // when it was queued
}

// SetDeleteMode sets when rollbacks delete the subvolume they displaced (OpenWith sets it before
// the recovery, which then defers the same way the old copies crashed rollbacks left).
func (s *Store) SetDeleteMode(m DeleteMode) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.deleteMode = m
	if m == DeleteInBackground && s.reaper == nil {
		r := &reaper{queued: map[string]bool{}, stop: make(chan struct{}), done: make(chan struct{})}
		r.cond = sync.NewCond(&r.mu)
		s.reaper = r
		go s.reap(r)
	}
}

func (s *Store) currentDeleteMode() (DeleteMode, *reaper) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.deleteMode, s.reaper
}

// stepReap is what the step hook is called with before the reaper deletes an old copy.
const stepReap = "rollback.delete-old (reaper)"

func reapKey(t *txn) string { return t.Agent + "/" + t.Session + "/" + t.Tmp }

// enqueue hands a rollback at its delete-old step to the reaper; false if it is stopped.
func (r *reaper) enqueue(t *txn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return false
	}
	if !r.queued[reapKey(t)] {
		r.queued[reapKey(t)] = true
		r.queue = append(r.queue, queued{t: t, when: time.Now()})
		r.cond.Broadcast()
	}
	return true
}

// reap runs the reaper until Close stops it (what is queued then stays journaled), on an OS thread of its own at nice 19: the kernel's
// work of the deletion is done in that thread, so it takes only CPU time nothing else wants.
func (s *Store) reap(r *reaper) {
	defer close(r.done)
	runtime.LockOSThread() // never unlocked: the thread, with its priority, ends with the goroutine
	_ = unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), 19)
	for {
		r.mu.Lock()
		for len(r.queue) == 0 && !r.stopped {
			r.cond.Wait()
		}
		if r.stopped {
			r.mu.Unlock()
			return
		}
		q := r.queue[0]
		r.queue = r.queue[1:]
		r.busy = true
		r.mu.Unlock()
		t := q.t
		select {
		case <-time.After(time.Until(q.when.Add(reapDelay))):
		case <-r.stop:
			return // it stays journaled
		}
		if err := s.deleteOld(t); err != nil {
			s.audit("rollback.delete-old", t.Agent, t.Session, t.Checkpoint, fmt.Sprintf("txn=%s: %v (left for the next start)", t.ID, err))
		}
		r.mu.Lock()
		delete(r.queued, reapKey(t))
		r.busy = false
		r.cond.Broadcast()
		r.mu.Unlock()
	}
}

// deleteOld finishes a rollback journaled at its delete-old step: it deletes the swap subvolume
// if it is still the old current/ the rollback displaced, and drops the journal entry. A session
// that is gone took both copies with it.
func (s *Store) deleteOld(t *txn) error {
	if h := s.hook(); h != nil {
		if err := h(stepReap); err != nil {
			return &crash{step: stepReap, err: err}
		}
	}
	unlock, err := s.lockSession("rollback.delete-old", t.Agent, t.Session)
	if err != nil {
		return err
	}
	defer unlock()
	dir, err := openDir(s.fd(), sessionRel(t.Agent, t.Session))
	if errors.Is(err, unix.ENOENT) {
		return s.journalRemove(t)
	}
	if err != nil {
		return err
	}
	defer dir.Close()
	tmp, err := subvolIDAt(int(dir.Fd()), t.Tmp)
	if err != nil {
		return err
	}
	if tmp != 0 && tmp == t.OldID {
		if err := s.deleteSubvol(int(dir.Fd()), t.Tmp, t.Tmp); err != nil {
			return err
		}
		s.quotaFreed()
	}
	return s.journalRemove(t)
}

// WaitDeletes waits until the reaper has nothing queued (at once without one).
func (s *Store) WaitDeletes() {
	_, r := s.currentDeleteMode()
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for (len(r.queue) > 0 || r.busy) && !r.stopped {
		r.cond.Wait()
	}
}

// stopReaper ends the reaper after the deletion in progress; what is still queued stays
// journaled, and the next Open deletes it.
func (s *Store) stopReaper() {
	_, r := s.currentDeleteMode()
	if r == nil {
		return
	}
	r.mu.Lock()
	if !r.stopped {
		r.stopped = true
		close(r.stop)
	}
	r.cond.Broadcast()
	r.mu.Unlock()
	<-r.done
}

// isRollbackSwap reports whether a session directory entry is a rollback's swap subvolume.
func isRollbackSwap(name string) bool { return strings.HasPrefix(name, ".rollback-") }
