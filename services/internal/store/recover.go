package store

import (
	"errors"
	"fmt"
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
// that no transaction and no index entry owns. A transaction it cannot finish quarantines its
// session (and holds back the session's later transactions); the rest of the store is served.
// At start-up (not after a Handover, while other sessions' runs are live) it also empties every
// session's /tmp staging.
func (s *Store) recover(startup bool) error {
	txns, err := loadJournal(s.stateDir)
	if err != nil {
		return err
	}
	// A rollback at its delete-old step only has its old copy left to delete: with a deferring
	// delete mode it is queued for the reaper or left journaled, and the sweep keeps it.
	mode, r := s.currentDeleteMode()
	keep := map[string]bool{}
	for _, t := range txns {
		if s.holdTxn(t) {
			continue
		}
		if t.Op == opRollback && t.Step == stepRbDeleteOld &&
			(mode == DeleteLater || mode == DeleteInBackground && r.enqueue(t)) {
			keep[reapKey(t)] = true
			continue
		}
		if err := s.recoverTxn(t); err != nil {
			s.quarantineTxn(t, fmt.Errorf("at %s: %w", t.Step, err))
		}
	}
	s.sweep(keep, startup)
	return nil
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
			_, err = s.deleteSessionTree(t.Agent, t.Session)
		}
	case opDeleteSession:
		var deleted []string
		deleted, err = s.deleteSessionTree(t.Agent, t.Session)
		if err != nil {
			err = errors.Join(err, s.forgetCheckpoints(t.Agent, t.Session, deleted))
		} else {
			err = s.forgetSession(t.Agent, t.Session)
		}
	case opCreateAgent:
		err = s.recoverCreateAgent(t)
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
	return s.deleteSubvol(int(cps.Fd()), t.Checkpoint, "checkpoints/"+t.Checkpoint)
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
		return s.deleteSubvol(d, t.Tmp, t.Tmp)
	}
	return nil
}

// sweep removes what a crash can leave behind outside any journal entry: snapshots in
// checkpoints/ the index does not know (a delete that forgot the checkpoint first), .rollback-*
// copies beside a healthy current/, agent trees moved aside for deletion and, at start-up, the
// runs' /tmp staging. It leaves quarantined sessions alone. What it cannot remove is audited and
// left for the next start: a leftover never keeps the store from opening.
func (s *Store) sweep(keep map[string]bool, startup bool) {
	if agents, err := openDir(s.fd(), "agents"); err == nil {
		names, _ := agents.Readdirnames(-1)
		for _, n := range names {
			if strings.HasPrefix(n, ".deleted-") {
				if err := s.removeAll(int(agents.Fd()), n, "agents/"+n); err != nil {
					s.audit("sweep", "", "", "", err.Error())
				}
			}
		}
		agents.Close()
	}
	s.mu.Lock()
	type sess struct {
		agent, id string
		rec       *sessionRec
	}
	var all []sess
	for aid, a := range s.ix.Agents {
		for sid, sr := range a.Sessions {
			if s.quarantinedLocked(aid, sid) == nil {
				all = append(all, sess{aid, sid, sr})
			}
		}
	}
	s.mu.Unlock()
	for _, x := range all {
		if err := s.sweepSession(x.agent, x.id, x.rec, keep, startup); err != nil {
			s.audit("sweep", x.agent, x.id, "", err.Error())
		}
	}
}

// RunTmpDir is the directory, in each session's directory (beside current/, so on the session's
// own filesystem but in no checkpoint), where the runs' private /tmp are staged.
const RunTmpDir = ".run-tmp"

func (s *Store) sweepSession(agentID, sessionID string, sr *sessionRec, keep map[string]bool, startup bool) error {
	dir, err := openDir(s.fd(), sessionRel(agentID, sessionID))
	if err != nil {
		return nil // nothing to sweep; operations on the session report the problem
	}
	defer dir.Close()
	var errs []error
	if startup {
		if tmp, err := openDir(int(dir.Fd()), RunTmpDir); err == nil {
			names, _ := tmp.Readdirnames(-1)
			for _, n := range names {
				errs = append(errs, s.removeAll(int(tmp.Fd()), n, RunTmpDir+"/"+n))
			}
			tmp.Close()
		}
	}
	if cps, err := openDir(int(dir.Fd()), "checkpoints"); err == nil {
		names, _ := cps.Readdirnames(-1)
		for _, n := range names {
			if sr.Checkpoints[n] == nil {
				errs = append(errs, s.removeAll(int(cps.Fd()), n, "checkpoints/"+n))
			}
		}
		cps.Close()
	}
	if ok, _ := openSubvolCheck(int(dir.Fd()), "current"); !ok {
		return errors.Join(errs...) // never drop a copy while current/ is not healthy
	}
	names, _ := dir.Readdirnames(-1)
	for _, n := range names {
		if isRollbackSwap(n) && !keep[agentID+"/"+sessionID+"/"+n] {
			errs = append(errs, s.deleteSubvol(int(dir.Fd()), n, n))
		}
	}
	return errors.Join(errs...)
}
