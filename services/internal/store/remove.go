package store

import (
	"errors"
	"fmt"
	"sort"

	"golang.org/x/sys/unix"
)

func cpKey(agentID, sessionID, id string) string { return agentID + "/" + sessionID + "/" + id }

// DeleteCheckpoint deletes a checkpoint. A pinned one is refused (ErrPinned), and so is one a
// rollback is restoring from (ErrConflict). Its children are re-parented to its parent, so the
// DAG stays connected. The index changes first; a snapshot left behind by a crash is not in the
// index and is removed at the next Open.
func (s *Store) DeleteCheckpoint(agentID, sessionID, id string) error {
	const op = "checkpoint.delete"
	if err := s.checkNotInUse(op, agentID, sessionID, id); err != nil {
		return err // before waiting for the session: a rollback holds it
	}
	unlock, err := s.lockSession(op, agentID, sessionID)
	if err != nil {
		return err
	}
	defer unlock()
	cps, err := s.forgetCheckpoint(op, agentID, sessionID, id)
	if err != nil {
		return err
	}
	defer cps.Close()
	if err := s.deleteSubvol(int(cps.Fd()), id, "checkpoints/"+id); err != nil {
		return fmt.Errorf("%s: checkpoint forgotten, snapshot left for cleanup at next start: %w", op, err)
	}
	s.quotaFreed()
	s.audit(op, agentID, sessionID, id, "")
	return nil
}

// forgetCheckpoint checks that the checkpoint may be deleted and drops it from the index; it
// returns the checkpoints/ directory that still holds its snapshot.
func (s *Store) forgetCheckpoint(op, agentID, sessionID, id string) (*osFile, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, r, err := s.findCheckpoint(op, agentID, sessionID, id)
	if err != nil {
		return nil, err
	}
	if r.Pinned {
		return nil, &Error{Op: op, Field: "checkpoint_id", ID: id, Err: ErrPinned, Hint: "unpin it first"}
	}
	if err := s.inUseLocked(op, agentID, sessionID, id); err != nil {
		return nil, err
	}
	cps, err := openDir(s.fd(), sessionRel(agentID, sessionID)+"/checkpoints")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	if _, err := openSubvolCheck(int(cps.Fd()), id); err != nil {
		cps.Close()
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	err = s.update(agentID, sessionID, func(ix *index) error {
		sr := ix.session(agentID, sessionID)
		parent := sr.Checkpoints[id].Parent
		delete(sr.Checkpoints, id)
		for _, c := range sr.Checkpoints {
			if c.Parent == id {
				c.Parent = parent
			}
		}
		if sr.Head == id {
			sr.Head = parent
		}
		return nil
	})
	if err != nil {
		cps.Close()
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	return cps, nil
}

func (s *Store) checkNotInUse(op, agentID, sessionID, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inUseLocked(op, agentID, sessionID, id)
}

func (s *Store) inUseLocked(op, agentID, sessionID, id string) error {
	if s.inUse[cpKey(agentID, sessionID, id)] > 0 {
		return &Error{Op: op, Field: "checkpoint_id", ID: id, Err: ErrConflict,
			Hint: "a rollback is restoring from it; retry when it has finished"}
	}
	return nil
}

func openSubvolCheck(dirfd int, name string) (bool, error) {
	f, err := openSubvol(dirfd, name)
	if err != nil {
		return false, err
	}
	f.Close()
	return true, nil
}

// Pin sets or clears a checkpoint's pin. Pinned checkpoints refuse deletion.
func (s *Store) Pin(agentID, sessionID, id string, pinned bool) error {
	s.ops.RLock()
	defer s.ops.RUnlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, _, err := s.findCheckpoint("checkpoint.pin", agentID, sessionID, id); err != nil {
		return err
	}
	err := s.update(agentID, sessionID, func(ix *index) error {
		ix.session(agentID, sessionID).Checkpoints[id].Pinned = pinned
		return nil
	})
	if err == nil {
		s.audit("checkpoint.pin", agentID, sessionID, id, fmt.Sprintf("pinned=%v", pinned))
	}
	return err
}

const opSessionDelete = "session.delete"

// DeleteSession deletes current/ and every checkpoint, and every subvolume nested in them (a
// managed run or an old workspace may have made some). It refuses (ErrPinned) while any
// checkpoint is pinned, and (ErrConflict) when current/ is not the session's subvolume. It is
// journaled and rolled forward by recovery. If a deletion fails, the index forgets the
// checkpoints already deleted (it never names a subvolume that is gone) and the session is
// quarantined with the reason; deleting it again retries. A quarantined session can always be
// deleted, whatever state its recovery left current/ in.
func (s *Store) DeleteSession(agentID, id string) error {
	const op = opSessionDelete
	unlock, err := s.lockSession(op, agentID, id)
	if err != nil {
		return err
	}
	defer unlock()
	s.mu.Lock()
	q := s.quarantinedLocked(agentID, id)
	sr, err := s.findSession(op, agentID, id)
	if q != nil && errors.Is(err, ErrNotFound) {
		err = nil // a session that never reached the index, or has left it
	}
	if err == nil && sr != nil {
		for cid, c := range sr.Checkpoints {
			if c.Pinned {
				err = &Error{Op: op, Field: "session_id", ID: id, Err: ErrPinned,
					Hint: fmt.Sprintf("checkpoint %q is pinned; unpin it first", cid)}
				break
			}
		}
	}
	var stale []string
	if q != nil {
		stale = append(stale, q.Txns...)
	}
	s.mu.Unlock()
	if err != nil {
		return err
	}
	if q == nil {
		dir, cur, err := s.openCurrent(op, agentID, id)
		if err != nil {
			return err
		}
		cur.Close()
		dir.Close()
	}
	t := s.newTxn(opDeleteSession, agentID, id)
	if err := s.step(t, stepDelSubvols); err != nil {
		s.park(t)
		return fmt.Errorf("%s: %w", op, err)
	}
	if err := s.deleteSession(t); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if err := s.step(t, stepDelIndex); err != nil {
		s.park(t)
		return fmt.Errorf("%s: %w", op, err)
	}
	if err := s.forgetSession(agentID, id); err != nil {
		s.park(t)
		return fmt.Errorf("%s: %w", op, err)
	}
	// The transactions the quarantine kept are moot now: the session and its trees are gone.
	for _, txnID := range stale {
		if err := s.journalRemove(&txn{ID: txnID}); err != nil {
			return fmt.Errorf("%s: %w", op, err)
		}
	}
	s.mu.Lock()
	delete(s.quarantine, agentID+"/"+id)
	s.mu.Unlock()
	s.audit(op, agentID, id, "", "")
	s.quotaFreed()
	s.quotaForget(agentID, id)
	return s.journalRemove(t)
}

// deleteSession runs a delete transaction's deletion step. On failure the checkpoints it deleted
// leave the index and the session is quarantined (a simulated crash leaves all as it is).
func (s *Store) deleteSession(t *txn) error {
	deleted, err := s.deleteSessionTree(t.Agent, t.Session)
	if err == nil {
		return nil
	}
	var c *crash
	if errors.As(err, &c) {
		s.park(t)
		return err
	}
	if ferr := s.forgetCheckpoints(t.Agent, t.Session, deleted); ferr != nil {
		err = errors.Join(err, ferr)
	}
	s.quarantineTxn(t, err)
	return fmt.Errorf("%w; the session is quarantined: %s", err, quarantineHint)
}

// deleteSessionTree removes every subvolume of the session (nested ones first) and then its
// directories, and returns the checkpoints it deleted. current/, rollback copies and the runs'
// /tmp staging go first, so that a failure there leaves every checkpoint in place. It is
// idempotent: recovery runs it again after a crash.
func (s *Store) deleteSessionTree(agentID, id string) (deleted []string, err error) {
	sessions, err := openDir(s.fd(), workspaceRel(agentID)+"/sessions")
	if errors.Is(err, unix.ENOENT) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer sessions.Close()
	if ok, err := existsAt(int(sessions.Fd()), id); !ok {
		return nil, err
	}
	dir, err := openDir(int(sessions.Fd()), id)
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	names, err := dir.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	for _, n := range names { // current/, any .rollback-* left over, .run-tmp
		if n == "checkpoints" {
			continue
		}
		if err := s.removeAll(int(dir.Fd()), n, n); err != nil {
			return nil, err
		}
	}
	if cps, err := openDir(int(dir.Fd()), "checkpoints"); err == nil {
		names, err := cps.Readdirnames(-1)
		sort.Strings(names)
		for _, n := range names {
			if err != nil {
				break
			}
			if err = s.removeAll(int(cps.Fd()), n, "checkpoints/"+n); err == nil {
				deleted = append(deleted, n)
			}
		}
		cps.Close()
		if err != nil {
			return deleted, err
		}
		if err := unix.Unlinkat(int(dir.Fd()), "checkpoints", unix.AT_REMOVEDIR); err != nil {
			return deleted, err
		}
	}
	return deleted, unix.Unlinkat(int(sessions.Fd()), id, unix.AT_REMOVEDIR)
}

// forgetCheckpoints drops deleted checkpoints from the index (re-parenting their children, as
// DeleteCheckpoint does).
func (s *Store) forgetCheckpoints(agentID, sessionID string, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.update(agentID, sessionID, func(ix *index) error {
		sr := ix.session(agentID, sessionID)
		if sr == nil {
			return nil
		}
		for _, id := range ids {
			c := sr.Checkpoints[id]
			if c == nil {
				continue
			}
			delete(sr.Checkpoints, id)
			for _, o := range sr.Checkpoints {
				if o.Parent == id {
					o.Parent = c.Parent
				}
			}
			if sr.Head == id {
				sr.Head = c.Parent
			}
		}
		return nil
	})
}

func (s *Store) forgetSession(agentID, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.update(agentID, id, func(ix *index) error {
		if a := ix.Agents[agentID]; a != nil {
			delete(a.Sessions, id)
		}
		return nil
	})
}
