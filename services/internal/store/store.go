package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Store is the workspace store rooted at one directory on a Btrfs filesystem. It is safe for
// concurrent use; operations on one session are serialised.
type Store struct {
	root     string
	rootDir  *os.File // every workspace path is opened beneath it, without following symlinks
	stateDir string
	lock     *os.File // flock on stateDir/.lock

	// ops is held shared by every operation that changes the store and exclusively by Handover.
	ops      sync.RWMutex
	lost     error // set when Handover could not take the state lock back
	mu       sync.Mutex
	ix       *index
	sessions map[string]*sync.Mutex // per-session operation locks
	inUse    map[string]int         // checkpoint keys a rollback is restoring from
	pending  map[string]string      // session key → id of a transaction left for recovery
	// quarantine holds the sessions whose recovery could not complete (see quarantine.go).
	quarantine map[string]*Quarantine
	lockWait   time.Duration
	hookFn     func(step string) error
	seq        uint64

	deleteMode DeleteMode // see SetDeleteMode
	reaper     *reaper    // with DeleteInBackground

	quota quotas // see quota.go
}

// Open opens the store at root (which must be on Btrfs) with its state in stateDir, which must
// not be inside root/agents. It first recovers every transaction a crash left in the journal; a
// session whose recovery cannot complete is quarantined (see Quarantined), never the store.
func Open(root, stateDir string) (*Store, error) { return OpenWith(root, stateDir, DeleteNow) }

// OpenWith is Open with the delete mode set before the recovery (see SetDeleteMode).
func OpenWith(root, stateDir string, mode DeleteMode) (*Store, error) {
	return OpenOptions(root, stateDir, Options{DeleteMode: mode})
}

// Options are the optional settings of OpenOptions.
type Options struct {
	DeleteMode DeleteMode
	// LockWait bounds how long Open waits for another holder of the state lock to let go (a
	// daemon that is still exiting, e.g. while the kernel finishes a subvolume deletion it
	// started); 0 means DefaultLockWait, a negative value not at all.
	LockWait time.Duration
}

// DefaultLockWait is how long Open waits for the state lock by default.
const DefaultLockWait = 30 * time.Second

// OpenOptions is Open with options.
func OpenOptions(root, stateDir string, o Options) (*Store, error) {
	mode := o.DeleteMode
	if o.LockWait == 0 {
		o.LockWait = DefaultLockWait
	}
	root, err := filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	if stateDir, err = filepath.Abs(stateDir); err != nil {
		return nil, err
	}
	if rel, err := filepath.Rel(filepath.Join(root, "agents"), stateDir); err == nil && filepath.IsLocal(rel) {
		return nil, fmt.Errorf("open store: state dir %s is inside %s/agents; put it outside the rollback scope, e.g. %s",
			stateDir, root, filepath.Join(root, ".allox-state"))
	}
	for _, d := range []string{filepath.Join(root, "agents"), filepath.Join(stateDir, journalDir)} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("open store: %w", err)
		}
	}
	// agents/ is traversable but not listable: sandboxed runs start as an unprivileged uid, which
	// must reach the one current/ it binds (the sandbox then shows it nothing else of the store).
	if err := os.Chmod(filepath.Join(root, "agents"), 0o711); err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(root, &fs); err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	if uint32(fs.Type) != unix.BTRFS_SUPER_MAGIC {
		return nil, fmt.Errorf("open store: root %s is not on Btrfs (filesystem magic %#x); mount a Btrfs filesystem there", root, fs.Type)
	}
	lock, err := lockState(stateDir, o.LockWait)
	if err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	s := &Store{root: root, stateDir: stateDir, lock: lock, lockWait: o.LockWait,
		sessions: map[string]*sync.Mutex{}, inUse: map[string]int{}, pending: map[string]string{},
		quarantine: map[string]*Quarantine{}}
	s.SetDeleteMode(mode)
	if s.rootDir, err = os.Open(root); err == nil {
		s.removeTemps()
		if s.ix, err = s.loadIndex(); err == nil {
			err = s.recover(true)
		}
	}
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("open store: %w", err)
	}
	return s, nil
}

// Close releases the store's directory handle and its lock on the state directory.
func (s *Store) Close() error {
	s.stopReaper()
	if s.rootDir != nil {
		s.rootDir.Close()
	}
	return s.lock.Close()
}

// SetStepHook installs a test hook called before each journaled step (after the step is
// recorded). Returning an error aborts the operation right there, as a crash would.
func (s *Store) SetStepHook(h func(step string) error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hookFn = h
}

func (s *Store) hook() func(string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hookFn
}

func (s *Store) fd() int { return int(s.rootDir.Fd()) }

// update applies fn to a copy of the index and persists the one record it may change: with
// sessionID "", agentID's entry in the agent list (agents.json); else that session's record and
// checkpoint DAG (index/agents/<agent>/<session>.json, removed when fn drops the session). fn
// must change nothing else. Only that record is copied and only its file written, so the cost
// does not grow with other agents' state. On any error nothing changes. The caller holds s.mu.
func (s *Store) update(agentID, sessionID string, fn func(ix *index) error) error {
	next := s.ix.cloneFor(agentID, sessionID)
	if err := fn(next); err != nil {
		return err
	}
	var err error
	if sessionID == "" {
		err = s.saveAgents(next, agentID)
	} else {
		err = s.saveSession(next, agentID, sessionID)
	}
	if err != nil {
		return fmt.Errorf("save index: %w", err)
	}
	s.ix = next
	return nil
}

// lockSession serialises operations on one session. It refuses a session whose failed
// transaction is still in the journal: only recovery at the next Open may touch it.
func (s *Store) lockSession(op, agentID, sessionID string) (unlock func(), err error) {
	s.ops.RLock()
	s.mu.Lock()
	k := agentID + "/" + sessionID
	m := s.sessions[k]
	if m == nil {
		m = &sync.Mutex{}
		s.sessions[k] = m
	}
	s.mu.Unlock()
	m.Lock()
	s.mu.Lock()
	txn, lost, q := s.pending[k], s.lost, s.quarantine[k]
	s.mu.Unlock()
	if q != nil && op != opSessionDelete {
		m.Unlock()
		s.ops.RUnlock()
		return nil, quarantinedError(op, q)
	}
	if lost != nil {
		m.Unlock()
		s.ops.RUnlock()
		return nil, &Error{Op: op, Field: "session_id", ID: sessionID, Err: ErrConflict, Hint: lost.Error()}
	}
	if txn != "" {
		m.Unlock()
		s.ops.RUnlock()
		return nil, &Error{Op: op, Field: "session_id", ID: sessionID, Err: ErrConflict,
			Hint: "transaction " + txn + " on this session failed and awaits recovery; restart the daemon"}
	}
	return func() { m.Unlock(); s.ops.RUnlock() }, nil
}

// Handover lends the store to another process for the duration of fn: it waits until no
// operation is in flight and holds every new one back, releases the state lock so that the other
// process can Open the same root and state (the hash-pinned recover binary runs its journaled
// rollback that way), then takes the lock back, reloads the index and recovers whatever the other
// process left unfinished. If the lock cannot be taken back, every later session operation is
// refused.
func (s *Store) Handover(fn func() error) error {
	s.ops.Lock()
	defer s.ops.Unlock()
	if err := s.lock.Close(); err != nil {
		return fmt.Errorf("handover: release the state lock: %w", err)
	}
	fnErr := fn()
	lock, err := lockState(s.stateDir, s.lockWait)
	if err != nil {
		s.mu.Lock()
		s.lost = fmt.Errorf("the state lock was lent out and could not be taken back (%w); restart the daemon", err)
		s.mu.Unlock()
		return errors.Join(fnErr, fmt.Errorf("handover: take the state lock back: %w", err))
	}
	s.lock = lock
	ix, err := s.loadIndex()
	if err == nil {
		s.mu.Lock()
		s.ix, s.pending, s.quarantine = ix, map[string]string{}, map[string]*Quarantine{}
		s.mu.Unlock()
		err = s.recover(false)
	}
	if err != nil {
		return errors.Join(fnErr, fmt.Errorf("handover: reload: %w", err))
	}
	return fnErr
}

// park marks t's session as awaiting recovery at the next Open.
func (s *Store) park(t *txn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pending[t.Agent+"/"+t.Session] = t.ID
}

func (s *Store) newTxn(op, agentID, sessionID string) *txn {
	s.mu.Lock()
	id := s.newTxnIDLocked()
	s.mu.Unlock()
	return &txn{ID: id, Op: op, Agent: agentID, Session: sessionID}
}

// Relative paths below the root.
func agentRel(agentID string) string     { return "agents/" + agentID }
func workspaceRel(agentID string) string { return agentRel(agentID) + "/workspace" }
func sessionRel(agentID, sessionID string) string {
	return workspaceRel(agentID) + "/sessions/" + sessionID
}

func (s *Store) abs(rel string) string { return filepath.Join(s.root, filepath.FromSlash(rel)) }
