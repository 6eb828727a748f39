// Package audit is the daemon's audit log: one JSON line per mutation (who asked, on which
// listener, what it touched, how it ended) and per event the daemon causes itself (a run's exit,
// an observer's fence, the store's journaled steps and recoveries). It lives in the daemon's state
// directory, outside every workspace and every rollback, as stateDir/audit.jsonl, rotated at a
// size with a bounded number of older files (audit.jsonl.1 is the newest of them). Appends are
// safe across goroutines and across independent Log values (the store's and the RPC layer's):
// each takes an flock on the file.
package audit

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// Origins of an entry: the listener a request came in on, or the daemon itself.
const (
	Loopback = "loopback"
	Host     = "host"
	Daemon   = "daemon"
)

// OK is the outcome of a mutation that succeeded; a refused or failed one carries its error code
// (e.g. "conflict", "invalid_params", "forbidden").
const OK = "ok"

// Entry is one line of the log.
type Entry struct {
	Time         time.Time `json:"time"`
	Action       string    `json:"action"` // an RPC action, "process.exit", or "store.<op>" for the store's own steps
	AgentID      string    `json:"agent_id,omitempty"`
	SessionID    string    `json:"session_id,omitempty"`
	CheckpointID string    `json:"checkpoint_id,omitempty"`
	RunID        string    `json:"run_id,omitempty"`
	TurnID       string    `json:"turn_id,omitempty"`
	Origin       string    `json:"origin"`
	Outcome      string    `json:"outcome"`
	Error        string    `json:"error,omitempty"`
	Detail       string    `json:"detail,omitempty"`
}

// File is the log's name in the state directory.
const File = "audit.jsonl"

// Defaults: rotate at 8 MiB and keep 4 older files, so the log never takes more than 40 MiB.
const (
	DefaultMaxBytes = 8 << 20
	DefaultKeep     = 4
)

// maxField bounds every string of an entry: ids and messages come from requests.
const maxField = 1024

// Log appends to Dir/Name (Name empty means File, audit.jsonl). Zero MaxBytes and Keep mean the
// defaults. Other logs of the daemon with their own line type (the network broker's) reuse its
// rotation through Name and AppendLine.
type Log struct {
	Dir      string
	Name     string
	MaxBytes int64
	Keep     int
}

// Append writes one entry (its Time set to now when zero) as one line, rotating first when the
// line would take the file past MaxBytes.
func (l Log) Append(e Entry) error {
	if e.Time.IsZero() {
		e.Time = time.Now().UTC()
	}
	for _, s := range []*string{&e.Action, &e.AgentID, &e.SessionID, &e.CheckpointID, &e.RunID, &e.TurnID, &e.Error, &e.Detail} {
		*s = clip(*s)
	}
	line, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	return l.AppendLine(append(line, '\n'))
}

// AppendLine writes line, which must be one JSON value ending in a newline, rotating first when
// it would take the file past MaxBytes.
func (l Log) AppendLine(line []byte) error {
	for range 8 { // another Log may rotate between our open and our lock
		f, err := l.open()
		if err != nil {
			return err
		}
		again, err := l.appendLocked(f, line)
		f.Close() // releases the lock
		if !again {
			return err
		}
	}
	return errors.New("audit: the log kept being rotated under us")
}

func (l Log) path() string { return filepath.Join(l.Dir, l.name()) }

func (l Log) name() string {
	if l.Name != "" {
		return l.Name
	}
	return File
}

func (l Log) open() (*os.File, error) {
	f, err := os.OpenFile(l.path(), os.O_WRONLY|os.O_APPEND|os.O_CREATE|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("audit: lock: %w", err)
	}
	return f, nil
}

// appendLocked writes line to f, which is locked. again is true when f is no longer the log
// (rotated away before we held the lock) or was just rotated: the caller opens the new file.
func (l Log) appendLocked(f *os.File, line []byte) (again bool, err error) {
	var fst, pst unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &fst); err != nil {
		return false, fmt.Errorf("audit: %w", err)
	}
	if err := unix.Stat(l.path(), &pst); err != nil || pst.Ino != fst.Ino || pst.Dev != fst.Dev {
		return true, nil
	}
	if fst.Size > 0 && fst.Size+int64(len(line)) > l.maxBytes() {
		if err := l.rotate(); err != nil {
			return false, err
		}
		return true, nil
	}
	if _, err := f.Write(line); err != nil {
		return false, fmt.Errorf("audit: %w", err)
	}
	return false, nil
}

// rotate shifts audit.jsonl.N to .N+1 (dropping the oldest) and the log to .1. The caller holds
// the log's lock.
func (l Log) rotate() error {
	keep := l.keep()
	for i := keep; i >= 1; i-- {
		from := l.path() + "." + strconv.Itoa(i)
		if i == keep {
			if err := os.Remove(from); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("audit: rotate: %w", err)
			}
			continue
		}
		if err := os.Rename(from, l.path()+"."+strconv.Itoa(i+1)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("audit: rotate: %w", err)
		}
	}
	if err := os.Rename(l.path(), l.path()+".1"); err != nil {
		return fmt.Errorf("audit: rotate: %w", err)
	}
	return nil
}

func (l Log) maxBytes() int64 {
	if l.MaxBytes > 0 {
		return l.MaxBytes
	}
	return DefaultMaxBytes
}

func (l Log) keep() int {
	if l.Keep > 0 {
		return l.Keep
	}
	return DefaultKeep
}

func clip(s string) string {
	if len(s) <= maxField {
		return s
	}
	return s[:maxField] + "…"
}

// Files returns the paths of the log named name in dir that are still kept, oldest first (the
// rotated files, then the log itself, which may not exist yet).
func Files(dir, name string) []string {
	files := []string{}
	for i := 1; ; i++ {
		p := filepath.Join(dir, name+"."+strconv.Itoa(i))
		if _, err := os.Stat(p); err != nil {
			break
		}
		files = append([]string{p}, files...)
	}
	return append(files, filepath.Join(dir, name))
}

// Read returns every entry still kept in dir, oldest first (the rotated files, then the log).
func Read(dir string) ([]Entry, error) {
	var out []Entry
	for _, p := range Files(dir, File) {
		if err := ScanLines(p, func(line []byte) error {
			var e Entry
			if err := json.Unmarshal(line, &e); err != nil {
				return fmt.Errorf("%s: %w", p, err)
			}
			out = append(out, e)
			return nil
		}); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// ScanLines calls each with every line of the log file path (lines of up to 1 MiB); a missing
// file (rotated away, or not written yet) has none. each's error stops the scan and is returned.
func ScanLines(path string, each func(line []byte) error) error {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if err := each(sc.Bytes()); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}
