package tracked

import (
	"encoding/json"
	"errors"
	"fmt"
	"github.com/allox-os/allox/internal/atomicfile"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
)

const statusFile = "status.json"

// writeStatus persists a run record atomically.
func writeStatus(dir string, st *Status) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.Write(filepath.Join(dir, statusFile), append(b, '\n'), 0o600)
}

// loadStatuses reads every run record under recordsDir, sorted by run id.
func loadStatuses(recordsDir string) ([]*Status, error) {
	ents, err := os.ReadDir(recordsDir)
	if err != nil {
		return nil, err
	}
	var out []*Status
	for _, e := range ents {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), "r") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(recordsDir, e.Name(), statusFile))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		var st Status
		if err := json.Unmarshal(b, &st); err != nil {
			return nil, fmt.Errorf("run record %s: %w", e.Name(), err)
		}
		out = append(out, &st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].RunID < out[j].RunID })
	return out, nil
}

// boundedWriter writes at most max bytes to a file and drops the rest,
// so a noisy run cannot fill the records disk.
type boundedWriter struct {
	mu      sync.Mutex
	f       *os.File
	max, n  int64
	dropped int64
}

func (w *boundedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	keep := int64(len(p))
	if room := w.max - w.n; keep > room {
		keep = max(room, 0)
	}
	if keep > 0 {
		if _, err := w.f.Write(p[:keep]); err != nil {
			return 0, err
		}
		w.n += keep
	}
	w.dropped += int64(len(p)) - keep
	return len(p), nil
}

func (w *boundedWriter) droppedBytes() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.dropped
}

const maxOutputChunk = 1 << 20

// readChunk reads up to limit bytes of a stream file from offset.
func readChunk(path string, offset, limit int64) ([]byte, int64, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, 0, 0, err
	}
	if offset >= fi.Size() {
		return nil, offset, fi.Size(), nil
	}
	buf := make([]byte, min(limit, fi.Size()-offset))
	n, err := f.ReadAt(buf, offset)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, 0, 0, err
	}
	return buf[:n], offset + int64(n), fi.Size(), nil
}
