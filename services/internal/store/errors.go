// Package store is the Btrfs workspace store of the workspace daemon: agents, sessions, the
// checkpoint DAG and scoped, journaled rollback. It lays workspaces out exactly as the seed draws
// them (<root>/agents/<agent_id>/workspace/{shared,sessions/<session_id>/{current,checkpoints}})
// and keeps its own state (the checkpoint index, the transaction journal, audit events) in a
// separate state directory that no rollback ever touches. It knows nothing about HTTP.
//
// The index is one file per record, so that one agent's state never slows another's
// operations: STATE/index/agents.json holds every agent's record (its creation time, not its
// sessions) and STATE/index/agents/<agent>/<session>.json one session's record and checkpoint
// DAG (labels included). Each is written whole with internal/atomicfile, and a mutation writes
// only the record it changes: a checkpoint, rollback, pin or delete rewrites its session's file,
// agent.create and agent.delete rewrite agents.json (tens of bytes per agent). Each journaled
// step therefore still changes exactly one index file atomically, as with the single index.json
// of earlier versions, which Open migrates (built in STATE/.index-migrate, renamed into place,
// index.json removed last). Per-record files rather than an embedded database: no dependency,
// files an operator can read, and the same atomic-write and journal argument as before.
//
// Nested subvolumes: a Btrfs snapshot is not recursive, so a subvolume nested in current/ (a
// managed run or an old workspace can make one) would be an empty directory in a checkpoint.
// CreateCheckpoint therefore refuses such a current/, naming the path; every deletion (the
// session, the current/ a rollback displaced, leftovers) deletes nested subvolumes first,
// deepest first, found through Btrfs's own back references (BTRFS_IOC_GET_SUBVOL_ROOTREF), not a
// walk of the tree. A rollback discards them with the rest of the old current/.
//
// Failures: the index never names a subvolume that is gone (a half-done delete forgets what it
// deleted). A journaled transaction that cannot be finished — at start or when undoing a failed
// step — quarantines its session (Quarantined, Session.Quarantine, ErrQuarantined): the store
// opens and serves everything else, refuses the session's operations with the reason, and
// session.delete removes it whatever state it is in.
package store

import (
	"errors"
	"fmt"
)

// Sentinels; test with errors.Is.
var (
	ErrNotFound  = errors.New("not found")
	ErrExists    = errors.New("already exists")
	ErrInvalidID = errors.New("invalid id")
	ErrPinned    = errors.New("checkpoint is pinned")
	ErrConflict  = errors.New("conflict")
)

// Error is a request error that names the offending field and says how to fix the request.
type Error struct {
	Op    string // e.g. "session.create"
	Field string // agent_id, session_id, checkpoint_id
	ID    string // the offending value
	Err   error  // one of the sentinels, possibly wrapped
	Hint  string // what to do about it
}

func (e *Error) Error() string {
	msg := fmt.Sprintf("%s: %s %q: %v", e.Op, e.Field, e.ID, e.Err)
	if e.Hint != "" {
		msg += "; " + e.Hint
	}
	return msg
}

func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is the sentinel this error carries.
func (e *Error) Is(target error) bool { return errors.Is(e.Err, target) }

func notFound(op, field, id, hint string) error {
	return &Error{Op: op, Field: field, ID: id, Err: ErrNotFound, Hint: hint}
}

func exists(op, field, id string) error {
	return &Error{Op: op, Field: field, ID: id, Err: ErrExists, Hint: "choose another " + field + " or delete the existing one first"}
}
