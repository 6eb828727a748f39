package evidence

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
)

// Evidence is a set as read back from disk, with every integrity problem
// found on the way. It holds everything a verdict needs; the verdict itself
// does no I/O.
type Evidence struct {
	Dir       string
	Header    *Header                         // nil if header.json is missing or unreadable
	Closed    bool                            // manifest.json present and readable
	Problems  []string                        // why the set is not complete; empty when it is
	Snapshots map[string]map[string]*Snapshot // point → domain → snapshot
	Residue   *Snapshot                       // residue.jsonl; nil when the run left no residue to record
	History   *History                        // nil if history.json is missing or unreadable
	Faults    []string                        // lines of the fault log

	content map[string][]byte // files read whole while checking the manifest, by path in the set
}

// Complete reports whether the set is closed, intact and fault-free.
func (e *Evidence) Complete() bool { return len(e.Problems) == 0 }

// Snapshot returns the snapshot of a domain at a point, or nil.
func (e *Evidence) Snapshot(point, domain string) *Snapshot { return e.Snapshots[point][domain] }

// Load reads the set in dir. It fails only if dir cannot be read at all or
// its header.json is in another format than Format (ErrFormat); every other defect is a Problem that makes the evidence incomplete:
// no manifest (unclosed), a hash or size mismatch, a required file missing
// from the set or the manifest, an unlisted file, an unreadable snapshot, a
// non-empty fault log, and a history that is missing, unavailable or lost
// events.
func Load(dir string) (*Evidence, error) {
	if _, err := os.ReadDir(dir); err != nil {
		return nil, fmt.Errorf("evidence dir: %w", err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, HeaderFile)); err == nil {
		if err := checkFormat(b); err != nil {
			return nil, fmt.Errorf("evidence %s: %s: %w", dir, HeaderFile, err)
		}
	}
	e := &Evidence{Dir: dir, Snapshots: map[string]map[string]*Snapshot{}}
	e.load()
	slices.Sort(e.Problems)
	e.Problems = slices.Compact(e.Problems)
	return e, nil
}

func (e *Evidence) load() {
	var h Header
	if err := e.readJSON(HeaderFile, &h); err == nil {
		if verr := h.Validate(); verr != nil {
			e.problem("%s: %v", HeaderFile, verr)
		} else {
			e.Header = &h
		}
	}
	e.checkManifest()
	if e.Header == nil {
		return
	}
	// Snapshots decode concurrently (a workspace of 10,000 files is three files of 1 MB in a
	// protocol 3 set); problems are recorded in order afterwards.
	type decoded struct {
		point, domain, name string
		snap                *Snapshot
		err                 error
	}
	var all []*decoded
	for _, p := range e.Header.Points() {
		e.Snapshots[p] = map[string]*Snapshot{}
		for _, d := range e.Header.Domains {
			all = append(all, &decoded{point: p, domain: d, name: SnapshotFile(p, d)})
		}
	}
	var wg sync.WaitGroup
	for _, x := range all {
		wg.Go(func() { x.snap, x.err = e.decodeSnapshot(x.name) })
	}
	wg.Wait()
	for _, x := range all {
		if e.readProblem(x.name, x.err) != nil {
			continue
		}
		if x.snap.Point != x.point || x.snap.Domain != x.domain {
			e.problem("%s: holds %s/%s", x.name, x.snap.Point, x.snap.Domain)
			continue
		}
		e.Snapshots[x.point][x.domain] = x.snap
	}
	e.readResidue()
	e.readHistory()
	e.readFaults()
}

func (e *Evidence) readResidue() {
	if _, err := os.Stat(filepath.Join(e.Dir, ResidueFile)); errors.Is(err, os.ErrNotExist) {
		return
	}
	s, err := e.readSnapshot(ResidueFile)
	if err != nil {
		return
	}
	if s.Point != PointResidue || s.Domain != "processes" {
		e.problem("%s: holds %s/%s", ResidueFile, s.Point, s.Domain)
		return
	}
	e.Residue = s
}

func (e *Evidence) problem(format string, args ...any) {
	e.Problems = append(e.Problems, fmt.Sprintf(format, args...))
}

// checkManifest compares the manifest with the files on disk.
func (e *Evidence) checkManifest() {
	if _, err := os.Stat(filepath.Join(e.Dir, ManifestFile)); err != nil {
		e.problem("set not closed: no %s (%v)", ManifestFile, err)
		return
	}
	var m Manifest
	if e.readJSON(ManifestFile, &m) != nil {
		return
	}
	e.Closed = true
	disk, err := e.hashFiles()
	if err != nil {
		e.problem("%v", err)
		return
	}
	onDisk := map[string]ManifestEntry{}
	for _, f := range disk.Files {
		onDisk[f.Path] = f
	}
	listed := map[string]bool{}
	for _, f := range m.Files {
		listed[f.Path] = true
		d, ok := onDisk[f.Path]
		switch {
		case !ok:
			e.problem("%s: listed in the manifest but missing", f.Path)
		case d.SHA256 != f.SHA256 || d.Size != f.Size:
			e.problem("%s: sha256 %s (%d bytes) does not match the manifest's %s (%d bytes)", f.Path, d.SHA256, d.Size, f.SHA256, f.Size)
		}
	}
	for _, f := range disk.Files {
		if !listed[f.Path] {
			e.problem("%s: present but not in the manifest", f.Path)
		}
	}
	if e.Header != nil {
		for _, f := range e.Header.RequiredFiles() {
			if !listed[f] {
				e.problem("%s: required but not in the manifest", f)
			}
		}
	}
}

// hashFiles is Hash(e.Dir), reading the files concurrently and keeping those it reads whole
// (all but the history, which can be large and is only hashed) for decoding.
func (e *Evidence) hashFiles() (*Manifest, error) {
	files, err := manifestFiles(e.Dir)
	if err != nil {
		return nil, err
	}
	m := &Manifest{Files: make([]ManifestEntry, len(files))}
	content := make([][]byte, len(files))
	errs := make([]error, len(files))
	var wg sync.WaitGroup
	for i, f := range files {
		wg.Go(func() {
			p := filepath.Join(e.Dir, filepath.FromSlash(f.Path))
			if f.Path == HistoryFile {
				m.Files[i], errs[i] = hashFile(p)
			} else if content[i], errs[i] = os.ReadFile(p); errs[i] == nil {
				sum := sha256.Sum256(content[i])
				m.Files[i] = ManifestEntry{Size: int64(len(content[i])), SHA256: hex.EncodeToString(sum[:])}
			}
			m.Files[i].Path = f.Path
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("hash evidence: %w", err)
	}
	e.content = map[string][]byte{}
	for i, f := range files {
		if content[i] != nil {
			e.content[f.Path] = content[i]
		}
	}
	return m, nil
}

// file returns the content of a file of the set, as read for the manifest check if it was.
func (e *Evidence) file(name string) ([]byte, error) {
	if b, ok := e.content[name]; ok {
		return b, nil
	}
	return os.ReadFile(filepath.Join(e.Dir, filepath.FromSlash(name)))
}

// readJSON decodes a file of the set, recording a problem on failure.
func (e *Evidence) readJSON(name string, v any) error {
	b, err := e.file(name)
	if err == nil {
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		err = dec.Decode(v)
	}
	return e.readProblem(name, err)
}

// readSnapshot reads a snapshot file of the set, recording a problem on failure.
func (e *Evidence) readSnapshot(name string) (*Snapshot, error) {
	s, err := e.decodeSnapshot(name)
	return s, e.readProblem(name, err)
}

// decodeSnapshot reads and decodes a snapshot file of the set; safe for concurrent use.
func (e *Evidence) decodeSnapshot(name string) (*Snapshot, error) {
	b, err := e.file(name)
	if err != nil {
		return nil, err
	}
	return decodeSnapshot(b)
}

// readProblem records a problem for a file that could not be read.
func (e *Evidence) readProblem(name string, err error) error {
	if errors.Is(err, os.ErrNotExist) {
		e.problem("%s: missing", name)
		return err
	}
	if err != nil {
		e.problem("%s: unreadable: %v", name, err)
	}
	return err
}

func (e *Evidence) readHistory() {
	if _, err := os.Stat(filepath.Join(e.Dir, HistoryFile)); err != nil {
		e.problem("%s: missing", HistoryFile)
	}
	var h History
	if e.readJSON(HistorySummaryFile, &h) != nil {
		return
	}
	e.History = &h
	switch {
	case h.Unavailable != "":
		e.problem("history unavailable: %s", h.Unavailable)
	case h.Dropped > 0:
		e.problem("history recorder dropped %d of %d events", h.Dropped, h.Events+h.Dropped)
	case h.Incomplete:
		e.problem("history recorder reported its history incomplete")
	}
}

func (e *Evidence) readFaults() {
	b, err := os.ReadFile(filepath.Join(e.Dir, FaultFile))
	if err != nil {
		e.problem("%s: %v", FaultFile, err)
		return
	}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if l != "" {
			e.Faults = append(e.Faults, l)
		}
	}
	for _, f := range e.Faults {
		e.problem("observer fault: %s", f)
	}
}
