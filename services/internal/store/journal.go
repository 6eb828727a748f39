package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"github.com/allox-os/allox/internal/atomicfile"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Transaction kinds.
const (
	opCheckpoint    = "checkpoint"
	opRollback      = "rollback"
	opDeleteSession = "delete-session"
	opCreateSession = "create-session"
	opCreateAgent   = "create-agent"
)

// Journaled steps, in order. Each is recorded in the transaction's journal file before it
// happens; the step hook runs between the record and the action.
const (
	stepSessSubvol  = "session.subvolume"      // mkdir the session dir, create current/
	stepSessIndex   = "session.index"          // add the session to the index
	stepCpSnapshot  = "checkpoint.snapshot"    // read-only snapshot current/ → checkpoints/<id>
	stepCpIndex     = "checkpoint.index"       // add it to the index, advance the head
	stepRbSnapshot  = "rollback.snapshot"      // writable snapshot checkpoints/<id> → .rollback-<txn>
	stepRbExchange  = "rollback.exchange"      // renameat2(.rollback-<txn>, current, RENAME_EXCHANGE)
	stepRbIndex     = "rollback.index"         // head = checkpoint
	stepRbDeleteOld = "rollback.delete-old"    // delete .rollback-<txn>, now the old current
	stepDelSubvols  = "delete-session.subvols" // delete current/ and the checkpoints
	stepDelIndex    = "delete-session.index"   // drop the session from the index
	stepAgentDirs   = "agent.dirs"             // mkdir the agent's workspace, shared/ and sessions/
	stepAgentIndex  = "agent.index"            // add the agent to the index

	// stepSubvolDelete is not journaled: the step hook is called with "subvolume.delete <path>"
	// (the path below the session directory, e.g. current/x/y) before each subvolume is deleted,
	// nested ones first, and its error stands for that deletion failing.
	stepSubvolDelete = "subvolume.delete"

	// stepIndexWrite is not journaled either: the step hook is called with "index.write <file>"
	// (agents.json, "agent-dir <agent>" for removing a deleted agent's index directory, or
	// "session <agent>/<session>") before each index file is written or removed; its error
	// stands for a crash there.
	stepIndexWrite = "index.write"
)

// txn is one journal record, stateDir/journal/<id>.json. It is rewritten at each step and
// removed when the transaction is complete.
type txn struct {
	ID         string `json:"id"`
	Op         string `json:"op"`
	Agent      string `json:"agent_id"`
	Session    string `json:"session_id"`
	Checkpoint string `json:"checkpoint_id,omitempty"`
	Parent     string `json:"parent,omitempty"`
	Step       string `json:"step"`
	Tmp        string `json:"tmp,omitempty"`    // rollback: name of the swap subvolume in the session dir
	OldID      uint64 `json:"old_id,omitempty"` // rollback: subvolume id of current/ before the swap
	NewID      uint64 `json:"new_id,omitempty"` // rollback: subvolume id of the restored copy

	Labels map[string]string `json:"labels,omitempty"`
	Pin    bool              `json:"pin,omitempty"`

	// Quarantined is set when recovery could not finish the transaction: its session is
	// quarantined, since then, for that reason (see quarantine.go).
	Quarantined *quarantineRec `json:"quarantined,omitempty"`
}

const journalDir = "journal"

func (s *Store) journalSave(t *txn) error {
	b, err := json.MarshalIndent(t, "", "\t")
	if err != nil {
		return err
	}
	return atomicfile.Write(filepath.Join(s.stateDir, journalDir, t.ID+".json"), b, 0o600)
}

// journalRemove ends a transaction. The removal is not fsynced: replaying a finished
// transaction is a no-op (every recovery action checks the index and the subvolume ids first).
func (s *Store) journalRemove(t *txn) error {
	err := os.Remove(filepath.Join(s.stateDir, journalDir, t.ID+".json"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// loadJournal returns the pending transactions, oldest first.
func loadJournal(stateDir string) ([]*txn, error) {
	dir := filepath.Join(stateDir, journalDir)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []*txn
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".json") || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		t := &txn{}
		if err := json.Unmarshal(b, t); err != nil {
			return nil, fmt.Errorf("journal %s: %w", e.Name(), err)
		}
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// step journals t's next step and then runs the step hook. An error from either means the
// caller must stop here; a hook error simulates a crash, so nothing is undone.
func (s *Store) step(t *txn, name string) error {
	t.Step = name
	if err := s.journalSave(t); err != nil {
		return fmt.Errorf("journal %s: %w", name, err)
	}
	if h := s.hook(); h != nil {
		if err := h(name); err != nil {
			return &crash{step: name, err: err}
		}
	}
	return nil
}

// crash marks an abort by the step hook: the caller leaves everything as a real crash would.
type crash struct {
	step string
	err  error
}

func (c *crash) Error() string { return "aborted before " + c.step + ": " + c.err.Error() }
func (c *crash) Unwrap() error { return c.err }
