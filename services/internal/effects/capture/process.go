package capture

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/allox-os/allox/services/internal/effects/evidence"
)

// SessionCgroupAbsent is the note of a processes snapshot whose cgroup
// does not exist (e.g. the run's, removed by scrub_runtime): it holds no
// process.
const SessionCgroupAbsent = "cgroup absent: no process can be in it"

// Processes captures every process in the cgroup subtree at dir, keyed by
// pid and start time (pids are reused), with comm and exe quoted and the
// cgroup (relative to dir) last.
func Processes(dir string) *evidence.Snapshot {
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return &evidence.Snapshot{Note: SessionCgroupAbsent}
	}
	s := &evidence.Snapshot{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil // a child group removed while walking
			}
			return err
		}
		if !d.IsDir() {
			return nil
		}
		b, err := os.ReadFile(filepath.Join(p, "cgroup.procs"))
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		for _, f := range strings.Fields(string(b)) {
			if it, ok := process(f, rel); ok {
				s.Items = append(s.Items, it)
			}
		}
		return nil
	})
	if err != nil {
		return unconfirmed("walk " + dir + ": " + err.Error())
	}
	return s
}

// process describes one pid; ok is false if it exited meanwhile.
func process(pid, cgroup string) (evidence.Item, bool) {
	if _, err := strconv.Atoi(pid); err != nil {
		return evidence.Item{}, false
	}
	stat, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return evidence.Item{}, false
	}
	lp, rp := bytes.IndexByte(stat, '('), bytes.LastIndexByte(stat, ')')
	if lp < 0 || rp < lp {
		return evidence.Item{}, false
	}
	comm := string(stat[lp+1 : rp])
	// Fields after the comm start at field 3 (state); starttime is field 22.
	rest := strings.Fields(string(stat[rp+1:]))
	start := "?"
	if len(rest) > 19 {
		start = rest[19]
	}
	exe, err := os.Readlink("/proc/" + pid + "/exe")
	if err != nil {
		exe = "-"
	}
	// comm and exe quoted (Go syntax, reversible) so that no name runs into the next field.
	return evidence.Item{
		Key:   fmt.Sprintf("pid=%s start=%s", pid, start),
		Value: fmt.Sprintf("comm=%q exe=%q cgroup=%s", comm, exe, cgroup),
	}, true
}
