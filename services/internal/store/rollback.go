package store

import (
	"context"
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// Rollback makes the session's current/ a writable copy of one of its checkpoints. It touches
// nothing else: not the agent's shared/, not other sessions, not the state directory.
//
// Steps, each journaled before it runs (see recover.go for how a crash at each is resolved):
//
//	rollback.snapshot    snapshot checkpoints/<id> → .rollback-<txn> (writable)
//	rollback.exchange    renameat2(.rollback-<txn>, current, RENAME_EXCHANGE)
//	rollback.index       head = <id>
//	rollback.delete-old  delete .rollback-<txn>, which now holds the old current/ (before
//	                     returning, or later: see SetDeleteMode)
func (s *Store) Rollback(ctx context.Context, agentID, sessionID, checkpointID string) (*Session, error) {
	const op = "session.rollback"
	unlock, err := s.lockSession(op, agentID, sessionID)
	if err != nil {
		return nil, err
	}
	defer unlock()
	key := cpKey(agentID, sessionID, checkpointID)
	s.mu.Lock()
	_, _, err = s.findCheckpoint(op, agentID, sessionID, checkpointID)
	if err == nil {
		s.inUse[key]++
	}
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	defer func() { s.mu.Lock(); s.inUse[key]--; s.mu.Unlock() }()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	dir, cur, err := s.openCurrent(op, agentID, sessionID)
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	oldID, err := subvolID(int(cur.Fd()))
	cur.Close()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	src, err := openSubvol(int(dir.Fd()), "checkpoints/"+checkpointID)
	if err != nil {
		return nil, fmt.Errorf("%s: checkpoint %s: %w", op, checkpointID, err)
	}
	defer src.Close()

	t := s.newTxn(opRollback, agentID, sessionID)
	t.Checkpoint, t.Tmp, t.OldID = checkpointID, ".rollback-"+t.ID, oldID
	d := int(dir.Fd())
	if err := s.step(t, stepRbSnapshot); err != nil {
		return nil, s.abort(t, op, err)
	}
	if err := snapshot(int(src.Fd()), d, t.Tmp, false); err != nil {
		return nil, s.abort(t, op, err)
	}
	if t.NewID, err = subvolIDAt(d, t.Tmp); err != nil {
		return nil, s.abort(t, op, err)
	}
	if err := s.quotaAssign(agentID, sessionID, d, t.Tmp); err != nil {
		return nil, s.abort(t, op, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, s.abort(t, op, err)
	}
	if err := s.step(t, stepRbExchange); err != nil {
		return nil, s.abort(t, op, err)
	}
	if err := unix.Renameat2(d, t.Tmp, d, "current", unix.RENAME_EXCHANGE); err != nil {
		return nil, s.abort(t, op, fmt.Errorf("exchange: %w", err))
	}
	// From here on the new state is in place; recovery rolls forward.
	if err := s.step(t, stepRbIndex); err != nil {
		return nil, s.abortAfterExchange(t, op, d, err)
	}
	if err := s.setHead(agentID, sessionID, checkpointID); err != nil {
		return nil, s.abortAfterExchange(t, op, d, err)
	}
	if err := s.step(t, stepRbDeleteOld); err != nil {
		s.park(t)
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	// The ioctl returns once the kernel has evicted the subvolume's cached inodes; Btrfs's cleaner
	// reclaims its blocks later. The old copy can also be left to the store's reaper, or to
	// whoever opens the state next (SetDeleteMode).
	switch mode, r := s.currentDeleteMode(); {
	case mode == DeleteInBackground && r.enqueue(t):
	case mode == DeleteLater:
	default:
		if err := s.deleteSubvol(d, t.Tmp, t.Tmp); err == nil {
			s.quotaFreed()
			if err := s.journalRemove(t); err != nil {
				return nil, fmt.Errorf("%s: %w", op, err)
			}
		} // else the journal keeps it, and the next Open deletes it.
	}
	s.audit(op, agentID, sessionID, checkpointID, "txn="+t.ID)
	return s.GetSession(agentID, sessionID)
}

// abortAfterExchange undoes a rollback whose index update failed: swap the old current/ back.
func (s *Store) abortAfterExchange(t *txn, op string, d int, err error) error {
	var c *crash
	if errors.As(err, &c) {
		s.park(t)
		return fmt.Errorf("%s: %w", op, err)
	}
	if xerr := unix.Renameat2(d, t.Tmp, d, "current", unix.RENAME_EXCHANGE); xerr != nil {
		s.park(t)
		return fmt.Errorf("%s: %w (swap back: %w; recovered at next start)", op, err, xerr)
	}
	return s.abort(t, op, err)
}

func (s *Store) setHead(agentID, sessionID, head string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.update(agentID, sessionID, func(ix *index) error {
		if sr := ix.session(agentID, sessionID); sr != nil {
			sr.Head = head
		}
		return nil
	})
}
