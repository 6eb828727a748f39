package system

import (
	"bufio"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Self is what protects the daemon from its runs: its cgroup, that group's memory protection and
// its OOM score adjustment. Every field is best effort (zero when unreadable).
type Self struct {
	Pid                  int
	Cgroup               string // e.g. "/system/workspace-daemon"
	MemoryMin, MemoryLow string
	OOMScoreAdj          int
}

func (s *System) self() Self {
	me := Self{Pid: os.Getpid()}
	if f, err := os.Open(filepath.Join(s.ProcDir, "self/cgroup")); err == nil {
		me.Cgroup = unifiedCgroup(f)
		f.Close()
	}
	if me.Cgroup != "" {
		dir := filepath.Join(s.SysDir, "fs/cgroup", me.Cgroup)
		me.MemoryMin = readTrim(filepath.Join(dir, "memory.min"))
		me.MemoryLow = readTrim(filepath.Join(dir, "memory.low"))
	}
	me.OOMScoreAdj, _ = strconv.Atoi(readTrim(filepath.Join(s.ProcDir, "self/oom_score_adj")))
	return me
}

// unifiedCgroup returns the cgroup v2 path ("0::/path") of a /proc/PID/cgroup file.
func unifiedCgroup(r io.Reader) string {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if p, ok := strings.CutPrefix(sc.Text(), "0::"); ok {
			return p
		}
	}
	return ""
}

// tasks is the number of tasks in the system: the total of /proc/loadavg's "running/total".
func (s *System) tasks() int {
	f := strings.Fields(readTrim(filepath.Join(s.ProcDir, "loadavg")))
	if len(f) < 4 {
		return 0
	}
	_, total, _ := strings.Cut(f[3], "/")
	n, _ := strconv.Atoi(total)
	return n
}

func readTrim(p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
