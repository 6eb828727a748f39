package store

import (
	"errors"
	"fmt"
	"maps"
	"sort"
	"time"

	"golang.org/x/sys/unix"
)

// Checkpoint is a read-only snapshot of a session's current/, a node of the session's DAG.
type Checkpoint struct {
	AgentID, SessionID, ID string
	Parent                 string // the session head when it was taken; "" for a root
	Labels                 map[string]string
	Pinned                 bool
	Created                time.Time
	Path                   string
}

// CheckpointOptions are the optional parts of a checkpoint.
type CheckpointOptions struct {
	Labels map[string]string
	Pin    bool
}

func (s *Store) checkpoint(agentID, sessionID, id string, r *cpRec) *Checkpoint {
	return &Checkpoint{AgentID: agentID, SessionID: sessionID, ID: id, Parent: r.Parent,
		Labels: maps.Clone(r.Labels), Pinned: r.Pinned, Created: r.Created,
		Path: s.abs(sessionRel(agentID, sessionID) + "/checkpoints/" + id)}
}

// findCheckpoint checks the ids and returns both records. The caller holds s.mu.
func (s *Store) findCheckpoint(op, agentID, sessionID, id string) (*sessionRec, *cpRec, error) {
	sr, err := s.findSession(op, agentID, sessionID)
	if err != nil {
		return nil, nil, err
	}
	if err := checkID(op, "checkpoint_id", id); err != nil {
		return nil, nil, err
	}
	r := sr.Checkpoints[id]
	if r == nil {
		return sr, nil, notFound(op, "checkpoint_id", id,
			"use the id of an existing checkpoint of this session (checkpoint.list)")
	}
	return sr, r, nil
}

// CreateCheckpoint syncs the session's filesystem, then snapshots current/ read-only into
// checkpoints/<id>. Its parent is the session head; it becomes the new head.
func (s *Store) CreateCheckpoint(agentID, sessionID, id string, opt CheckpointOptions) (*Checkpoint, error) {
	const op = "checkpoint.create"
	if err := checkLabels(op, opt.Labels); err != nil {
		return nil, err
	}
	s.mu.Lock()
	_, _, err := s.findCheckpoint(op, agentID, sessionID, id)
	if q := s.quarantinedLocked(agentID, sessionID); q != nil {
		err = quarantinedError(op, q)
	}
	s.mu.Unlock()
	if err == nil {
		return nil, exists(op, "checkpoint_id", id)
	}
	var e *Error
	if !errors.As(err, &e) || e.Field != "checkpoint_id" || !errors.Is(err, ErrNotFound) {
		return nil, err
	}
	// Flush dirty data before the snapshot, outside the locks (runtime.md: a snapshot with
	// 1 GiB unsynced took 4.5 s).
	if err := s.syncSession(op, agentID, sessionID); err != nil {
		return nil, err
	}
	unlock, err := s.lockSession(op, agentID, sessionID)
	if err != nil {
		return nil, err
	}
	defer unlock()
	// Opened under the lock: a rollback may have swapped current/ since the sync.
	dir, cur, err := s.openCurrent(op, agentID, sessionID)
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	defer cur.Close()
	s.mu.Lock()
	sr, _, err := s.findCheckpoint(op, agentID, sessionID, id)
	parent := ""
	if sr != nil {
		parent = sr.Head
	}
	s.mu.Unlock()
	if !errors.Is(err, ErrNotFound) || sr == nil {
		if err == nil {
			err = exists(op, "checkpoint_id", id)
		}
		return nil, err
	}
	if err := refuseNested(op, sessionID, cur); err != nil {
		return nil, err
	}
	t := s.newTxn(opCheckpoint, agentID, sessionID)
	t.Checkpoint, t.Parent, t.Labels, t.Pin = id, parent, opt.Labels, opt.Pin
	cps, err := openDir(int(dir.Fd()), "checkpoints")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	defer cps.Close()
	if err := s.step(t, stepCpSnapshot); err != nil {
		return nil, s.abort(t, op, err)
	}
	if err := snapshot(int(cur.Fd()), int(cps.Fd()), id, true); err != nil {
		return nil, s.abort(t, op, err)
	}
	if err := s.quotaAssign(agentID, sessionID, int(cps.Fd()), id); err != nil {
		return nil, s.abort(t, op, err)
	}
	if err := s.step(t, stepCpIndex); err != nil {
		return nil, s.abort(t, op, err)
	}
	rec := &cpRec{Parent: parent, Labels: maps.Clone(opt.Labels), Pinned: opt.Pin, Created: time.Now().UTC()}
	s.mu.Lock()
	err = s.update(agentID, sessionID, func(ix *index) error {
		r := ix.session(agentID, sessionID)
		r.Checkpoints[id], r.Head = rec, id
		return nil
	})
	s.mu.Unlock()
	if err != nil {
		return nil, s.abort(t, op, err)
	}
	if err := s.journalRemove(t); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	s.audit(op, agentID, sessionID, id, "parent="+parent)
	return s.checkpoint(agentID, sessionID, id, rec), nil
}

// refuseNested refuses to checkpoint a current/ that holds nested subvolumes: a Btrfs snapshot
// is not recursive, so the checkpoint would hold an empty directory in place of each and a
// rollback to it would silently lose their contents.
func refuseNested(op, sessionID string, cur *osFile) error {
	kids, err := childSubvols(int(cur.Fd()))
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if len(kids) == 0 {
		return nil
	}
	more := ""
	if len(kids) > 1 {
		more = fmt.Sprintf(" (and %d more)", len(kids)-1)
	}
	return &Error{Op: op, Field: "session_id", ID: sessionID,
		Err:  fmt.Errorf("%w: current/%s is a nested Btrfs subvolume%s, which a checkpoint cannot hold", ErrConflict, kids[0].Path, more),
		Hint: "delete it (btrfs subvolume delete) or move its contents into a plain directory"}
}

// abort ends a failed transaction. After a simulated crash it leaves everything as it is, for
// recovery at the next Open; otherwise it runs that recovery now, so nothing is changed.
func (s *Store) abort(t *txn, op string, err error) error {
	var c *crash
	if errors.As(err, &c) {
		s.park(t)
	} else if rerr := s.recoverTxn(t); rerr != nil {
		s.quarantineTxn(t, fmt.Errorf("undo after %v: %w", err, rerr))
		err = errors.Join(err, fmt.Errorf("undo: %w; the session is quarantined: %s", rerr, quarantineHint))
	}
	return fmt.Errorf("%s: %w", op, err)
}

func (s *Store) syncSession(op, agentID, sessionID string) error {
	dir, cur, err := s.openCurrent(op, agentID, sessionID)
	if err != nil {
		return err
	}
	defer dir.Close()
	defer cur.Close()
	if err := unix.Syncfs(int(cur.Fd())); err != nil {
		return fmt.Errorf("%s: syncfs: %w", op, err)
	}
	return nil
}

// openCurrent opens the session directory and its current/, which must be a real subvolume.
func (s *Store) openCurrent(op, agentID, sessionID string) (dir, cur *osFile, err error) {
	dir, err = openDir(s.fd(), sessionRel(agentID, sessionID))
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", op, err)
	}
	cur, err = openSubvol(int(dir.Fd()), "current")
	if err != nil {
		dir.Close()
		return nil, nil, &Error{Op: op, Field: "session_id", ID: sessionID, Err: fmt.Errorf("%w: %w", ErrConflict, err),
			Hint: "current/ must be the session's Btrfs subvolume; it was replaced, so restore it with session.rollback or delete and recreate the session"}
	}
	return dir, cur, nil
}

// GetCheckpoint returns one checkpoint.
func (s *Store) GetCheckpoint(agentID, sessionID, id string) (*Checkpoint, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, r, err := s.findCheckpoint("checkpoint.get", agentID, sessionID, id)
	if err != nil {
		return nil, err
	}
	return s.checkpoint(agentID, sessionID, id, r), nil
}

// ListCheckpoints returns the session's checkpoints, oldest first.
func (s *Store) ListCheckpoints(agentID, sessionID string) ([]*Checkpoint, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sr, err := s.findSession("checkpoint.list", agentID, sessionID)
	if err != nil {
		return nil, err
	}
	out := make([]*Checkpoint, 0, len(sr.Checkpoints))
	for id, r := range sr.Checkpoints {
		out = append(out, s.checkpoint(agentID, sessionID, id, r))
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Created.Equal(out[j].Created) {
			return out[i].Created.Before(out[j].Created)
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}
