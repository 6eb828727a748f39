package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"github.com/allox-os/allox/internal/atomicfile"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// index is the checkpoint index, the daemon's record of agents, sessions and the checkpoint DAG.
// It is held in memory whole and persisted per record in the state directory, outside every
// rollback scope (see the package doc for the layout): a change rewrites only the file of the
// agent list or of the one session it changes, so one agent's state never slows another's
// operations. Installed records are never modified (update copies what it changes), so a record
// read under s.mu may be used after s.mu is released.
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

// The index files, below the state directory.
const (
	indexFile   = "index.json"     // the single file of earlier versions, migrated by Open
	indexDir    = "index"          // the index: agents.json and agents/<agent>/<session>.json
	agentsFile  = "agents.json"    // in indexDir: every agent's record, without its sessions
	sessionsDir = "agents"         // in indexDir: one directory per agent with sessions
	migrateDir  = ".index-migrate" // indexDir being built from indexFile
)

// agentsDoc is agents.json.
type agentsDoc struct {
	Agents map[string]agentHead `json:"agents"`
}

type agentHead struct {
	Created time.Time `json:"created"`
}

func (s *Store) indexPath(elem ...string) string {
	return filepath.Join(append([]string{s.stateDir, indexDir}, elem...)...)
}

func (s *Store) sessionFile(agentID, sessionID string) string {
	return s.indexPath(sessionsDir, agentID, sessionID+".json")
}

// migrateHook, set by tests, is called before each step of the migration from index.json;
// an error stops the migration there, as a crash would.
var migrateHook func(step string) error

// loadIndex reads the index, first migrating a single index.json of an earlier version. It
// removes the temporary files of writes a crash cut short and the directories of agents that
// are not in agents.json (an agent.create or agent.delete cut short between its two files).
// The caller holds the state lock.
func (s *Store) loadIndex() (*index, error) {
	if err := migrateIndex(s.stateDir); err != nil {
		return nil, fmt.Errorf("migrate %s to %s/: %w", indexFile, indexDir, err)
	}
	ix := &index{Agents: map[string]*agentRec{}}
	for _, d := range []string{s.indexPath(), s.indexPath(sessionsDir)} {
		s.cleanTemps(d)
	}
	var doc agentsDoc
	b, err := os.ReadFile(s.indexPath(agentsFile))
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, err
	default:
		if err := json.Unmarshal(b, &doc); err != nil {
			return nil, fmt.Errorf("BUG: corrupt checkpoint index %s: %w", s.indexPath(agentsFile), err)
		}
	}
	for id, a := range doc.Agents {
		ix.Agents[id] = &agentRec{Created: a.Created, Sessions: map[string]*sessionRec{}}
	}
	ents, err := os.ReadDir(s.indexPath(sessionsDir))
	if err != nil {
		return nil, err
	}
	for _, e := range ents {
		if !e.IsDir() || validID(e.Name()) != "" {
			continue
		}
		dir := s.indexPath(sessionsDir, e.Name())
		s.cleanTemps(dir)
		a := ix.Agents[e.Name()]
		if a == nil {
			// Left by an agent.create or agent.delete cut short; an agent without a record
			// never has sessions, so the directory is empty. If it is not (edited by hand), it
			// is moved out of agents/, so that an agent created again with that id never
			// inherits its sessions.
			if err := os.Remove(dir); err != nil {
				aside := s.indexPath(fmt.Sprintf(".orphaned-%s-%d", e.Name(), time.Now().UnixNano()))
				rerr := os.Rename(dir, aside)
				s.audit("cleanup", e.Name(), "", "", fmt.Sprintf("index directory %s of an unknown agent is not empty (%v): moved to %s (%v)", dir, err, aside, rerr))
				if rerr != nil {
					return nil, fmt.Errorf("index directory %s of an unknown agent: %w", dir, rerr)
				}
			}
			continue
		}
		names, err := os.ReadDir(dir)
		if err != nil {
			return nil, err
		}
		for _, n := range names {
			sid, ok := strings.CutSuffix(n.Name(), ".json")
			if !ok || validID(sid) != "" {
				continue
			}
			b, err := os.ReadFile(filepath.Join(dir, n.Name()))
			if err != nil {
				return nil, err
			}
			sr := &sessionRec{}
			if err := json.Unmarshal(b, sr); err != nil {
				return nil, fmt.Errorf("BUG: corrupt checkpoint index %s: %w", filepath.Join(dir, n.Name()), err)
			}
			if sr.Checkpoints == nil {
				sr.Checkpoints = map[string]*cpRec{}
			}
			a.Sessions[sid] = sr
		}
	}
	return ix, nil
}

// migrateIndex replaces a single index.json with the index directory. The new layout is built
// in .index-migrate, made durable, renamed into place (one atomic step), and only then is
// index.json removed: a crash before the rename leaves index.json authoritative and the
// migration starts again; a crash after it leaves a complete index/ and a stale index.json,
// which is removed.
func migrateIndex(stateDir string) error {
	old, dir, tmp := filepath.Join(stateDir, indexFile), filepath.Join(stateDir, indexDir), filepath.Join(stateDir, migrateDir)
	if _, err := os.Lstat(old); errors.Is(err, fs.ErrNotExist) {
		if err := os.RemoveAll(tmp); err != nil {
			return err
		}
		return mkdirDurable(filepath.Join(dir, sessionsDir))
	} else if err != nil {
		return err
	}
	if _, err := os.Lstat(dir); err == nil {
		return atomicfile.Remove(old) // renamed into place before a crash: index.json is stale
	}
	b, err := os.ReadFile(old)
	if err != nil {
		return err
	}
	ix := &index{}
	if err := json.Unmarshal(b, ix); err != nil {
		return fmt.Errorf("BUG: corrupt checkpoint index %s: %w", old, err)
	}
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	if err := writeLayout(tmp, ix); err != nil {
		return err
	}
	if err := migrateStep("rename"); err != nil {
		return err
	}
	if err := os.Rename(tmp, dir); err != nil {
		return err
	}
	if err := atomicfile.SyncDir(stateDir); err != nil {
		return err
	}
	if err := migrateStep("remove-old"); err != nil {
		return err
	}
	return atomicfile.Remove(old)
}

func migrateStep(name string) error {
	if migrateHook != nil {
		return migrateHook(name)
	}
	return nil
}

// writeLayout writes ix as a complete index directory at dir, every file and directory entry
// fsynced.
func writeLayout(dir string, ix *index) error {
	if err := os.MkdirAll(filepath.Join(dir, sessionsDir), 0o700); err != nil {
		return err
	}
	doc := agentsDoc{Agents: map[string]agentHead{}}
	for aid, a := range ix.Agents {
		doc.Agents[aid] = agentHead{Created: a.Created}
		ad := filepath.Join(dir, sessionsDir, aid)
		if err := os.Mkdir(ad, 0o700); err != nil {
			return err
		}
		for sid, sr := range a.Sessions {
			if err := migrateStep("session " + aid + "/" + sid); err != nil {
				return err
			}
			b, err := jsonIndent(sr)
			if err == nil {
				err = atomicfile.Write(filepath.Join(ad, sid+".json"), b, 0o600)
			}
			if err != nil {
				return err
			}
		}
	}
	if err := atomicfile.SyncDir(filepath.Join(dir, sessionsDir)); err != nil {
		return err
	}
	b, err := jsonIndent(doc)
	if err != nil {
		return err
	}
	return atomicfile.Write(filepath.Join(dir, agentsFile), b, 0o600) // also makes agents/ durable
}

// mkdirDurable makes dir and its missing parents, fsyncing each parent it adds an entry to.
func mkdirDurable(dir string) error {
	if _, err := os.Lstat(dir); err == nil {
		return nil
	}
	if err := mkdirDurable(filepath.Dir(dir)); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return atomicfile.SyncDir(filepath.Dir(dir))
}

// cloneFor returns a copy of ix that shares every record except agentID's, which is copied
// with its session map, and, if sessionID is set, that session's record, copied deeply: an
// update of that scope may change those and nothing else.
func (ix *index) cloneFor(agentID, sessionID string) *index {
	c := &index{Agents: maps.Clone(ix.Agents)}
	if c.Agents == nil {
		c.Agents = map[string]*agentRec{}
	}
	a := ix.Agents[agentID]
	if a == nil {
		return c
	}
	ca := &agentRec{Created: a.Created, Sessions: maps.Clone(a.Sessions)}
	if ca.Sessions == nil {
		ca.Sessions = map[string]*sessionRec{}
	}
	c.Agents[agentID] = ca
	if sr := a.Sessions[sessionID]; sessionID != "" && sr != nil {
		ca.Sessions[sessionID] = sr.clone()
	}
	return c
}

func (sr *sessionRec) clone() *sessionRec {
	c := *sr
	c.Checkpoints = make(map[string]*cpRec, len(sr.Checkpoints))
	for id, r := range sr.Checkpoints {
		cr := *r
		cr.Labels = maps.Clone(r.Labels)
		c.Checkpoints[id] = &cr
	}
	return &c
}

// saveAgents writes agents.json from ix, whose record of agentID was just added or removed.
// A new agent's index directory is made (durably) before agents.json names it; a removed
// agent's is removed after. A crash between the two leaves an empty directory of an agent
// agents.json does not name, which loadIndex removes.
func (s *Store) saveAgents(ix *index, agentID string) error {
	doc := agentsDoc{Agents: make(map[string]agentHead, len(ix.Agents))}
	for id, a := range ix.Agents {
		doc.Agents[id] = agentHead{Created: a.Created}
	}
	b, err := jsonIndent(doc)
	if err != nil {
		return err
	}
	dir := s.indexPath(sessionsDir, agentID)
	if ix.Agents[agentID] != nil {
		if err := mkdirDurable(dir); err != nil {
			return err
		}
	}
	if err := s.indexStep("agents.json"); err != nil {
		return err
	}
	if err := atomicfile.Write(s.indexPath(agentsFile), b, 0o600); err != nil {
		return err
	}
	if ix.Agents[agentID] == nil {
		if err := s.indexStep("agent-dir " + agentID); err != nil {
			return err
		}
		s.cleanTemps(dir)
		_ = os.Remove(dir) // a leftover is removed by loadIndex
	}
	return nil
}

// saveSession writes (or, when ix no longer has it, removes) the file of one session.
func (s *Store) saveSession(ix *index, agentID, sessionID string) error {
	if err := s.indexStep("session " + agentID + "/" + sessionID); err != nil {
		return err
	}
	p := s.sessionFile(agentID, sessionID)
	sr := ix.session(agentID, sessionID)
	if sr == nil {
		return atomicfile.Remove(p)
	}
	b, err := jsonIndent(sr)
	if err != nil {
		return err
	}
	if err := mkdirDurable(filepath.Dir(p)); err != nil {
		return err
	}
	return atomicfile.Write(p, b, 0o600)
}

// indexStep calls the step hook with "index.write <file>" before an index file is written: an
// error stands for a crash there (so tests can crash between the files of one operation). The
// caller holds s.mu.
func (s *Store) indexStep(file string) error {
	if h := s.hookFn; h != nil {
		if err := h(stepIndexWrite + " " + file); err != nil {
			return &crash{step: stepIndexWrite + " " + file, err: err}
		}
	}
	return nil
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
		s.cleanTemps(d)
	}
}

func (s *Store) cleanTemps(dir string) {
	if removed, err := atomicfile.RemoveTemps(dir); err != nil && !errors.Is(err, fs.ErrNotExist) || len(removed) > 0 {
		s.audit("cleanup", "", "", "", fmt.Sprintf("removed temporary files %v in %s (%v)", removed, dir, err))
	}
}
