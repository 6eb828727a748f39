package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"github.com/allox-os/allox/internal/atomicfile"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// index is the checkpoint index, the daemon's record of agents, sessions and the checkpoint DAG.
// It lives in the state directory, outside every rollback scope, as one JSON file written
// atomically after each change.
type index struct {
	Agents map[string]*agentRec `json:"agents"`
}

type agentRec struct {
	Created  time.Time              `json:"created"`
	Sessions map[string]*sessionRec `json:"sessions"`
}

type sessionRec struct {
	Created     time.Time         `json:"created"`
	Head        string            `json:"head,omitempty"`
	Checkpoints map[string]*cpRec `json:"checkpoints"`
}

type cpRec struct {
	Parent  string            `json:"parent,omitempty"`
	Labels  map[string]string `json:"labels,omitempty"`
	Pinned  bool              `json:"pinned,omitempty"`
	Created time.Time         `json:"created"`
}

const indexFile = "index.json"

func loadIndex(stateDir string) (*index, error) {
	ix := &index{Agents: map[string]*agentRec{}}
	b, err := os.ReadFile(filepath.Join(stateDir, indexFile))
	if errors.Is(err, fs.ErrNotExist) {
		return ix, nil
	}
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b, ix); err != nil {
		return nil, fmt.Errorf("BUG: corrupt checkpoint index %s: %w", indexFile, err)
	}
	if ix.Agents == nil {
		ix.Agents = map[string]*agentRec{}
	}
	return ix, nil
}

func (ix *index) clone() *index {
	b, err := json.Marshal(ix)
	if err != nil {
		panic("BUG: index does not marshal: " + err.Error())
	}
	c := &index{}
	if err := json.Unmarshal(b, c); err != nil {
		panic("BUG: index does not round-trip: " + err.Error())
	}
	return c
}

func (ix *index) session(agentID, sessionID string) *sessionRec {
	if a := ix.Agents[agentID]; a != nil {
		return a.Sessions[sessionID]
	}
	return nil
}

func jsonIndent(v any) ([]byte, error) { return json.MarshalIndent(v, "", "\t") }

func mkdirState(stateDir string) error {
	return os.MkdirAll(filepath.Join(stateDir, journalDir), 0o700)
}

// removeTemps removes the temporary files that index and journal writes killed half-way left
// (atomicfile's ".<name>.tmp-*"); Open calls it under the state lock, before anything writes.
func (s *Store) removeTemps() {
	for _, d := range []string{s.stateDir, filepath.Join(s.stateDir, journalDir)} {
		if removed, err := atomicfile.RemoveTemps(d); err != nil || len(removed) > 0 {
			s.audit("cleanup", "", "", "", fmt.Sprintf("removed temporary files %v in %s (%v)", removed, d, err))
		}
	}
}
