package store

import (
	"errors"
	"fmt"

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
	s.mu.Lock()
	defer s.mu.Unlock()
	_, r, err := s.findCheckpoint(op, agentID, sessionID, id)
	if err != nil {
		return err
	}
	if r.Pinned {
		return &Error{Op: op, Field: "checkpoint_id", ID: id, Err: ErrPinned, Hint: "unpin it first"}
	}
	if err := s.inUseLocked(op, agentID, sessionID, id); err != nil {
		return err
	}
	cps, err := openDir(s.fd(), sessionRel(agentID, sessionID)+"/checkpoints")
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	defer cps.Close()
	if _, err := openSubvolCheck(int(cps.Fd()), id); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	err = s.update(func(ix *index) error {
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
		return fmt.Errorf("%s: %w", op, err)
	}
	if err := subvolDelete(int(cps.Fd()), id); err != nil {
		return fmt.Errorf("%s: checkpoint forgotten, snapshot left for cleanup at next start: %w", op, err)
	}
	s.quotaFreed()
	s.audit(op, agentID, sessionID, id, "")
	return nil
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
	err := s.update(func(ix *index) error {
		ix.session(agentID, sessionID).Checkpoints[id].Pinned = pinned
		return nil
	})
	if err == nil {
		s.audit("checkpoint.pin", agentID, sessionID, id, fmt.Sprintf("pinned=%v", pinned))
	}
	return err
}

// DeleteSession deletes current/ and every checkpoint. It refuses (ErrPinned) while any
// checkpoint is pinned, and (ErrConflict) when current/ is not the session's subvolume. It is
// journaled and rolled forward by recovery.
func (s *Store) DeleteSession(agentID, id string) error {
	const op = "session.delete"
	unlock, err := s.lockSession(op, agentID, id)
	if err != nil {
		return err
	}
	defer unlock()
	s.mu.Lock()
	sr, err := s.findSession(op, agentID, id)
	if err == nil {
		for cid, c := range sr.Checkpoints {
			if c.Pinned {
				err = &Error{Op: op, Field: "session_id", ID: id, Err: ErrPinned,
					Hint: fmt.Sprintf("checkpoint %q is pinned; unpin it first", cid)}
				break
			}
		}
	}
	s.mu.Unlock()
	if err != nil {
		return err
	}
	dir, cur, err := s.openCurrent(op, agentID, id)
	if err != nil {
		return err
	}
	cur.Close()
	dir.Close()
	t := s.newTxn(opDeleteSession, agentID, id)
	if err := s.step(t, stepDelSubvols); err != nil {
		s.park(t)
		return fmt.Errorf("%s: %w", op, err)
	}
	if err := s.deleteSessionTree(agentID, id); err != nil {
		s.park(t)
		return fmt.Errorf("%s: %w (finished at next start)", op, err)
	}
	if err := s.step(t, stepDelIndex); err != nil {
		s.park(t)
		return fmt.Errorf("%s: %w", op, err)
	}
	if err := s.forgetSession(agentID, id); err != nil {
		s.park(t)
		return fmt.Errorf("%s: %w", op, err)
	}
	s.audit(op, agentID, id, "", "")
	s.quotaFreed()
	s.quotaForget(agentID, id)
	return s.journalRemove(t)
}

// deleteSessionTree removes every subvolume of the session and then its directories. It is
// idempotent: recovery runs it again after a crash.
func (s *Store) deleteSessionTree(agentID, id string) error {
	sessions, err := openDir(s.fd(), workspaceRel(agentID)+"/sessions")
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return err
	}
	defer sessions.Close()
	if ok, err := existsAt(int(sessions.Fd()), id); !ok {
		return err
	}
	dir, err := openDir(int(sessions.Fd()), id)
	if err != nil {
		return err
	}
	defer dir.Close()
	if cps, err := openDir(int(dir.Fd()), "checkpoints"); err == nil {
		names, _ := cps.Readdirnames(-1)
		for _, n := range names {
			if err := subvolDelete(int(cps.Fd()), n); err != nil {
				cps.Close()
				return err
			}
		}
		cps.Close()
		if err := unix.Unlinkat(int(dir.Fd()), "checkpoints", unix.AT_REMOVEDIR); err != nil {
			return err
		}
	}
	names, _ := dir.Readdirnames(-1)
	for _, n := range names { // current and any .rollback-* left over
		if err := subvolDelete(int(dir.Fd()), n); err != nil {
			return err
		}
	}
	return unix.Unlinkat(int(sessions.Fd()), id, unix.AT_REMOVEDIR)
}

func (s *Store) forgetSession(agentID, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.update(func(ix *index) error {
		if a := ix.Agents[agentID]; a != nil {
			delete(a.Sessions, id)
		}
		return nil
	})
}
