package store

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// action is what recovery does with a rollback transaction found in the journal.
type action int

const (
	rollBack    action = iota // the exchange did not happen: drop the new copy
	rollForward               // it did: record the head, drop the old copy
	adoptTmp                  // current/ is missing: rename the surviving copy into place
	cleanup                   // committed: only the old copy may be left to delete
	stuck                     // neither copy is what the journal expects: touch nothing
)

var actionNames = [...]string{"roll back", "roll forward", "adopt tmp", "clean up", "stuck"}

func (a action) String() string { return actionNames[a] }

// planRollback decides how to finish a rollback transaction from the journal and the subvolume
// ids now found at current/ and at the swap name (0 = absent). It never chooses to delete the
// subvolume at current/, and deletes the swap subvolume only when it is the copy that is not
// wanted: the one copy of anything is never deleted.
func planRollback(t *txn, cur, tmp uint64) (a action, deleteTmp bool) {
	switch {
	case cur == 0 && tmp != 0:
		return adoptTmp, false
	case cur == 0:
		return stuck, false
	case t.Step == stepRbDeleteOld:
		// Exchange and head are done; later rollbacks may have replaced current/ since.
		return cleanup, tmp != 0 && tmp == t.OldID
	case t.Step == stepRbSnapshot || t.NewID == 0:
		// The exchange was never journaled, so it never ran; tmp (if any) is a fresh copy.
		return rollBack, tmp != 0 && tmp != t.OldID && tmp != cur
	case cur == t.NewID:
		return rollForward, tmp != 0 && tmp == t.OldID
	case cur == t.OldID:
		return rollBack, tmp != 0 && tmp == t.NewID
	}
	return stuck, false
}

// recover finishes or undoes every transaction left in the journal, then removes leftovers
// that no transaction and no index entry owns.
func (s *Store) recover() error {
	txns, err := loadJournal(s.stateDir)
	if err != nil {
		return err
	}
	// A rollback at its delete-old step only has its old copy left to delete: with a deferring
	// delete mode it is queued for the reaper or left journaled, and the sweep keeps it.
	mode, r := s.currentDeleteMode()
	keep := map[string]bool{}
	var errs []error
	for _, t := range txns {
		if t.Op == opRollback && t.Step == stepRbDeleteOld &&
			(mode == DeleteLater || mode == DeleteInBackground && r.enqueue(t)) {
			keep[reapKey(t)] = true
			continue
		}
		if err := s.recoverTxn(t); err != nil {
			errs = append(errs, fmt.Errorf("journal %s (%s at %s): %w", t.ID, t.Op, t.Step, err))
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	return s.sweep(keep)
}

func (s *Store) recoverTxn(t *txn) error {
	var err error
	switch t.Op {
	case opCheckpoint:
		err = s.recoverCheckpoint(t)
	case opRollback:
		err = s.recoverRollback(t)
	case opCreateSession:
		s.mu.Lock()
		done := s.ix.session(t.Agent, t.Session) != nil
		s.mu.Unlock()
		if !done {
			err = s.deleteSessionTree(t.Agent, t.Session)
		}
	case opDeleteSession:
		err = s.deleteSessionTree(t.Agent, t.Session)
		if err == nil {
			err = s.forgetSession(t.Agent, t.Session)
		}
	default:
		err = fmt.Errorf("BUG: unknown journal op %q", t.Op)
	}
	if err != nil {
		return err
	}
	return s.journalRemove(t)
}

// recoverCheckpoint keeps a checkpoint that reached the index and removes a snapshot that did not.
func (s *Store) recoverCheckpoint(t *txn) error {
	s.mu.Lock()
	sr := s.ix.session(t.Agent, t.Session)
	done := sr != nil && sr.Checkpoints[t.Checkpoint] != nil
	s.mu.Unlock()
	if done {
		return nil
	}
	cps, err := openDir(s.fd(), sessionRel(t.Agent, t.Session)+"/checkpoints")
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return err
	}
	defer cps.Close()
	if ok, err := existsAt(int(cps.Fd()), t.Checkpoint); !ok {
		return err
	}
	return subvolDelete(int(cps.Fd()), t.Checkpoint)
}

func (s *Store) recoverRollback(t *txn) error {
	dir, err := openDir(s.fd(), sessionRel(t.Agent, t.Session))
	if errors.Is(err, unix.ENOENT) {
		return nil // the session is gone, and with it both copies
	}
	if err != nil {
		return err
	}
	defer dir.Close()
	d := int(dir.Fd())
	cur, err := subvolIDAt(d, "current")
	if err != nil {
		return err
	}
	tmp, err := subvolIDAt(d, t.Tmp)
	if err != nil {
		return err
	}
	a, del := planRollback(t, cur, tmp)
	s.audit("recover", t.Agent, t.Session, t.Checkpoint, fmt.Sprintf("txn=%s step=%s: %v", t.ID, t.Step, a))
	switch a {
	case stuck:
		return fmt.Errorf("BUG: current/ is subvolume %d, expected %d (old) or %d (new); left as is", cur, t.OldID, t.NewID)
	case adoptTmp:
		if err := unix.Renameat(d, t.Tmp, d, "current"); err != nil {
			return err
		}
		if tmp == t.NewID {
			return s.setHead(t.Agent, t.Session, t.Checkpoint)
		}
		return nil
	case rollForward:
		if err := s.setHead(t.Agent, t.Session, t.Checkpoint); err != nil {
			return err
		}
	}
	if del {
		return subvolDelete(d, t.Tmp)
	}
	return nil
}

// sweep removes what a crash can leave behind outside any journal entry: snapshots in
// checkpoints/ the index does not know (a delete that forgot the checkpoint first), .rollback-*
// copies beside a healthy current/, and agent trees moved aside for deletion.
func (s *Store) sweep(keep map[string]bool) error {
	if agents, err := os.ReadDir(s.abs("agents")); err == nil {
		for _, e := range agents {
			if strings.HasPrefix(e.Name(), ".deleted-") {
				os.RemoveAll(s.abs("agents/" + e.Name()))
			}
		}
	}
	for aid, a := range s.ix.Agents {
		for sid, sr := range a.Sessions {
			if err := s.sweepSession(aid, sid, sr, keep); err != nil {
				return fmt.Errorf("sweep %s/%s: %w", aid, sid, err)
			}
		}
	}
	return nil
}

func (s *Store) sweepSession(agentID, sessionID string, sr *sessionRec, keep map[string]bool) error {
	dir, err := openDir(s.fd(), sessionRel(agentID, sessionID))
	if err != nil {
		return nil // nothing to sweep; operations on the session report the problem
	}
	defer dir.Close()
	if cps, err := openDir(int(dir.Fd()), "checkpoints"); err == nil {
		names, _ := cps.Readdirnames(-1)
		for _, n := range names {
			if sr.Checkpoints[n] == nil {
				subvolDelete(int(cps.Fd()), n)
			}
		}
		cps.Close()
	}
	if ok, _ := openSubvolCheck(int(dir.Fd()), "current"); !ok {
		return nil // never drop a copy while current/ is not healthy
	}
	names, _ := dir.Readdirnames(-1)
	for _, n := range names {
		if isRollbackSwap(n) && !keep[agentID+"/"+sessionID+"/"+n] {
			if err := subvolDelete(int(dir.Fd()), n); err != nil {
				return err
			}
		}
	}
	return nil
}
