package evidence

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/allox-os/allox/internal/atomicfile"
)

// Set is an evidence set being written. It is not safe for concurrent use.
type Set struct {
	dir    string
	header Header
	closed bool
	// written holds the size and sha256 of each file as the set last wrote it whole (by its
	// path in the set): Close lists them without reading them back.
	written map[string]ManifestEntry
}

// Create makes dir (which must not exist yet) and writes the header, in
// Format, and an empty fault log into it.
func Create(dir string, h Header) (*Set, error) {
	h.Format = Format
	if err := h.Validate(); err != nil {
		return nil, err
	}
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("evidence dir %q: must be an absolute path outside every workspace", dir)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, fmt.Errorf("evidence dir: %w (its parent must exist, and each run needs a new directory)", err)
	}
	s := &Set{dir: dir, header: h, written: map[string]ManifestEntry{}}
	for _, p := range h.Points() {
		if err := os.Mkdir(filepath.Join(dir, p), 0o700); err != nil {
			return nil, fmt.Errorf("evidence point dir: %w", err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, FaultFile), nil, 0o600); err != nil {
		return nil, fmt.Errorf("evidence %s: %w", FaultFile, err)
	}
	if err := s.writeJSON(HeaderFile, &s.header); err != nil {
		return nil, err
	}
	return s, nil
}

// Dir is the set's directory.
func (s *Set) Dir() string { return s.dir }

// Header returns a copy of the set's header.
func (s *Set) Header() Header { return s.header }

// Path returns the absolute path of a file in the set, e.g. HistoryFile.
func (s *Set) Path(name string) string { return filepath.Join(s.dir, name) }

// WriteSnapshot stores snap as the file of its point and domain.
func (s *Set) WriteSnapshot(snap *Snapshot) error {
	if !slices.Contains(s.header.Points(), snap.Point) || !slices.Contains(s.header.Domains, snap.Domain) {
		return fmt.Errorf("BUG: snapshot %s/%s is not part of this set (points %v, domains %v)",
			snap.Point, snap.Domain, s.header.Points(), s.header.Domains)
	}
	if err := snap.Canonicalize(); err != nil {
		return err
	}
	return s.writeSnapshot(SnapshotFile(snap.Point, snap.Domain), snap)
}

// WriteResidue stores the processes snapshot taken at PointResidue.
func (s *Set) WriteResidue(snap *Snapshot) error {
	if snap.Point != PointResidue || snap.Domain != "processes" {
		return fmt.Errorf("BUG: residue snapshot is %s/%s, want %s/processes", snap.Point, snap.Domain, PointResidue)
	}
	if err := snap.Canonicalize(); err != nil {
		return err
	}
	return s.writeSnapshot(ResidueFile, snap)
}

// WriteHistory stores the history recorder's summary.
func (s *Set) WriteHistory(h History) error { return s.writeJSON(HistorySummaryFile, &h) }

// RecordCapture adds a capture's times to the header and rewrites it.
func (s *Set) RecordCapture(point string, started, finished time.Time) error {
	s.header.Captures = append(s.header.Captures, Capture{Point: point, Started: started.UTC(), Finished: finished.UTC()})
	return s.writeJSON(HeaderFile, &s.header)
}

// Fault appends one line to the fault log and syncs it.
func (s *Set) Fault(msg string) error {
	delete(s.written, FaultFile)
	f, err := os.OpenFile(s.Path(FaultFile), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("fault log: %w", err)
	}
	line := time.Now().UTC().Format(time.RFC3339Nano) + " " + strings.ReplaceAll(msg, "\n", " ") + "\n"
	_, err = f.WriteString(line)
	if err == nil {
		err = f.Sync()
	}
	return errors.Join(err, f.Close())
}

// Close writes the manifest over every file in the set, last and
// atomically. After Close the set must not be written again.
func (s *Set) Close() error {
	if s.closed {
		return errors.New("BUG: evidence set closed twice")
	}
	m, err := hashDir(s.dir, s.written)
	if err != nil {
		return err
	}
	// The files were written without fsync (a set is only worth anything once closed): make them
	// and their directories durable before the manifest that vouches for them.
	if err := syncTree(s.dir); err != nil {
		return err
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", ManifestFile, err)
	}
	if err := atomicfile.Write(s.Path(ManifestFile), append(b, '\n'), 0o600); err != nil {
		return err
	}
	s.closed = true
	return nil
}

// writeSnapshot writes a snapshot file (see decodeSnapshot).
func (s *Set) writeSnapshot(name string, snap *Snapshot) error {
	b, err := encodeSnapshot(snap)
	if err != nil {
		return fmt.Errorf("encode %s: %w", name, err)
	}
	return s.write(name, b)
}

// writeJSON writes one file of the set, compact (a snapshot of 10,000 files encodes 7× faster
// than indented; jq shows it). It is not synced here: Close syncs everything before it writes the
// manifest, and a set without its manifest counts as unclosed whatever it holds.
func (s *Set) writeJSON(name string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s: %w", name, err)
	}
	return s.write(name, append(b, '\n'))
}

// write writes one file of the set through a temporary file and a rename.
func (s *Set) write(name string, b []byte) error {
	sum := sha256.Sum256(b)
	s.written[name] = ManifestEntry{Path: name, Size: int64(len(b)), SHA256: hex.EncodeToString(sum[:])}
	tmp := s.Path(name) + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	return os.Rename(tmp, s.Path(name))
}

// syncTree fsyncs every file and directory below dir, files first, concurrently: on Btrfs
// concurrent fsyncs share a log commit.
func syncTree(dir string) error {
	var files, dirs []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			dirs = append(dirs, p)
		} else {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("sync evidence: %w", err)
	}
	for _, group := range [][]string{files, dirs} {
		errs := make([]error, len(group))
		var wg sync.WaitGroup
		for i, p := range group {
			wg.Go(func() { errs[i] = syncFile(p) })
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return err
		}
	}
	return nil
}

func syncFile(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return fmt.Errorf("sync evidence: %w", err)
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sync evidence %s: %w", p, err)
	}
	return nil
}

// Hash computes the manifest of the files in dir: every regular file except
// the manifest and the verifier reports, sorted by path.
func Hash(dir string) (*Manifest, error) { return hashDir(dir, nil) }

// hashDir is Hash, taking the entry of a file from known instead of reading it when the file
// still has the size known gives.
func hashDir(dir string, known map[string]ManifestEntry) (*Manifest, error) {
	files, err := manifestFiles(dir)
	if err != nil {
		return nil, err
	}
	m := &Manifest{Files: []ManifestEntry{}}
	for _, f := range files {
		if k, ok := known[f.Path]; ok && k.Size == f.Size {
			m.Files = append(m.Files, k)
			continue
		}
		e, err := hashFile(filepath.Join(dir, filepath.FromSlash(f.Path)))
		if err != nil {
			return nil, fmt.Errorf("hash evidence: %w", err)
		}
		e.Path = f.Path
		m.Files = append(m.Files, e)
	}
	return m, nil
}

// manifestFiles lists the files of the set in dir a manifest lists (every regular file but the
// manifest and the reports), by path in the set with their sizes, sorted by path. Anything else
// but a directory is an error.
func manifestFiles(dir string) ([]ManifestEntry, error) {
	var files []ManifestEntry
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || d.IsDir() || outsideManifest(rel) {
			return err
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("evidence %s: not a regular file", rel)
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		files = append(files, ManifestEntry{Path: filepath.ToSlash(rel), Size: info.Size()})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("hash evidence: %w", err)
	}
	slices.SortFunc(files, func(a, b ManifestEntry) int { return strings.Compare(a.Path, b.Path) })
	return files, nil
}

// outsideManifest names the files a manifest never lists.
func outsideManifest(rel string) bool {
	return rel == ManifestFile || rel == ReportFile || rel == RecoveryReportFile
}

func hashFile(p string) (ManifestEntry, error) {
	f, err := os.Open(p)
	if err != nil {
		return ManifestEntry{}, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return ManifestEntry{}, err
	}
	return ManifestEntry{Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}
