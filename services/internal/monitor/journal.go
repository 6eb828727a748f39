package monitor

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
)

// journal keeps each session's records as JSON Lines under root: <root>/<agent>/<session>.jsonl,
// bounded by Retention. Agent and session ids are the store's (a-z0-9._-, never "." or ".."), so
// they are safe path components.
type journal struct {
	root string
	ret  Retention
	mu   sync.Mutex
	size map[string]int64 // a session file's bytes, by path, once known
}

// Retention bounds what the journal keeps.
type Retention struct {
	// SessionBytes bounds a session's journal: past it the file becomes <session>.jsonl.1
	// (replacing an older one) and a new one starts, so a session keeps at most twice this.
	SessionBytes int64
	// Sessions bounds how many sessions' journals an agent keeps (a deleted session's stay for
	// the agent's summary across runs); the least recently written go first.
	Sessions int
}

// DefaultRetention is 32 MiB per session, 64 sessions per agent.
var DefaultRetention = Retention{SessionBytes: 32 << 20, Sessions: 64}

func (j *journal) path(agent, session string) string {
	return filepath.Join(j.root, agent, session+".jsonl")
}

// append writes recs to the session's journal in one write.
func (j *journal) append(agent, session string, recs []Record) error {
	if len(recs) == 0 {
		return nil
	}
	var buf []byte
	for i := range recs {
		line, err := json.Marshal(&recs[i])
		if err != nil {
			return fmt.Errorf("monitor journal: %w", err)
		}
		buf = append(append(buf, line...), '\n')
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	p := j.path(agent, session)
	size, known := j.size[p]
	if !known {
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			return fmt.Errorf("monitor journal: %w", err)
		}
		if fi, err := os.Stat(p); err == nil {
			size = fi.Size()
		} else if err := j.prune(agent); err != nil {
			return err
		}
	}
	if size > 0 && size+int64(len(buf)) > j.ret.SessionBytes {
		if err := os.Rename(p, p+".1"); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("monitor journal: rotate: %w", err)
		}
		size = 0
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("monitor journal: %w", err)
	}
	n, werr := f.Write(buf)
	if err := errors.Join(werr, f.Close()); err != nil {
		return fmt.Errorf("monitor journal: %w", err)
	}
	j.size[p] = size + int64(n)
	return nil
}

// prune removes the agent's least recently written session journals beyond Retention.Sessions-1,
// making room for a new one (j.mu held).
func (j *journal) prune(agent string) error {
	ents, err := os.ReadDir(filepath.Join(j.root, agent))
	if err != nil {
		return nil
	}
	type file struct {
		name string
		mod  int64
	}
	var files []file
	for _, e := range ents {
		if filepath.Ext(e.Name()) != ".jsonl" {
			continue
		}
		if fi, err := e.Info(); err == nil {
			files = append(files, file{e.Name(), fi.ModTime().UnixNano()})
		}
	}
	slices.SortFunc(files, func(a, b file) int { return int(a.mod - b.mod) })
	for len(files) >= j.ret.Sessions && len(files) > 0 {
		p := filepath.Join(j.root, agent, files[0].name)
		if err := errors.Join(os.Remove(p), ignoreMissing(os.Remove(p+".1"))); err != nil {
			return fmt.Errorf("monitor journal: retention: %w", err)
		}
		delete(j.size, p)
		files = files[1:]
	}
	return nil
}

func ignoreMissing(err error) error {
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

// read returns the session's records, oldest first (the rotated file's, then the current's).
func (j *journal) read(agent, session string) ([]Record, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	var out []Record
	p := j.path(agent, session)
	for _, f := range []string{p + ".1", p} {
		recs, err := readLines(f)
		if err != nil {
			return nil, err
		}
		out = append(out, recs...)
	}
	return out, nil
}

// sessions lists the sessions of an agent that have a journal.
func (j *journal) sessions(agent string) []string {
	ents, _ := os.ReadDir(filepath.Join(j.root, agent))
	var out []string
	for _, e := range ents {
		if n, ok := cutSuffix(e.Name(), ".jsonl"); ok {
			out = append(out, n)
		}
	}
	return out
}

func cutSuffix(s, suffix string) (string, bool) {
	if len(s) > len(suffix) && s[len(s)-len(suffix):] == suffix {
		return s[:len(s)-len(suffix)], true
	}
	return "", false
}

func readLines(path string) ([]Record, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("monitor journal: %w", err)
	}
	defer f.Close()
	var out []Record
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		var r Record
		if json.Unmarshal(sc.Bytes(), &r) == nil {
			out = append(out, r)
		}
	}
	return out, sc.Err()
}
