package tracker

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

// clockTick is USER_HZ, the unit of /proc/<pid>/stat times; fixed at 100
// on Linux for user space.
const clockTick = 100

// stat is what the tracker needs from /proc/<pid>/stat.
type stat struct {
	comm      string
	ppid      int
	startTime uint64 // ns since boot
}

// parseStat parses /proc/<pid>/stat. The comm field may hold spaces and
// parentheses, so the fields are split after its last ')'.
func parseStat(r io.Reader) (stat, error) {
	b, err := io.ReadAll(io.LimitReader(r, 4096))
	if err != nil {
		return stat{}, err
	}
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || end < open {
		return stat{}, fmt.Errorf("stat %q: no (comm)", b)
	}
	f := strings.Fields(string(b[end+1:]))
	// f[0] is field 3 (state), f[1] field 4 (ppid), f[19] field 22 (starttime).
	if len(f) < 20 {
		return stat{}, fmt.Errorf("stat: %d fields after comm, want at least 20", len(f))
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		return stat{}, fmt.Errorf("stat ppid %q: %w", f[1], err)
	}
	ticks, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return stat{}, fmt.Errorf("stat starttime %q: %w", f[19], err)
	}
	return stat{comm: string(b[open+1 : end]), ppid: ppid, startTime: ticks * (1e9 / clockTick)}, nil
}

// parseCmdline splits /proc/<pid>/cmdline (NUL-separated, usually
// NUL-terminated) into argv.
func parseCmdline(b []byte) []string {
	b = bytes.TrimSuffix(b, []byte{0})
	if len(b) == 0 {
		return []string{}
	}
	return strings.Split(string(b), "\x00")
}

// readProcess reads one live process from the procfs mounted at proc.
// exe is empty when it cannot be read (kernel threads, other namespaces).
func readProcess(proc string, pid int) (Process, error) {
	dir := filepath.Join(proc, strconv.Itoa(pid))
	f, err := os.Open(filepath.Join(dir, "stat"))
	if err != nil {
		return Process{}, err
	}
	st, err := parseStat(f)
	f.Close()
	if err != nil {
		return Process{}, fmt.Errorf("pid %d: %w", pid, err)
	}
	p := Process{PID: pid, PPID: st.ppid, StartTime: st.startTime, Comm: st.comm, State: StateRunning}
	p.Exe, _ = os.Readlink(filepath.Join(dir, "exe"))
	cmd, _ := os.ReadFile(filepath.Join(dir, "cmdline"))
	p.Argv = parseCmdline(cmd)
	return p, nil
}

// argvOf returns the argv and exe of a live process, best effort.
func argvOf(proc string, pid int) ([]string, string) {
	dir := filepath.Join(proc, strconv.Itoa(pid))
	cmd, err := os.ReadFile(filepath.Join(dir, "cmdline"))
	if err != nil {
		return nil, ""
	}
	exe, _ := os.Readlink(filepath.Join(dir, "exe"))
	return parseCmdline(cmd), exe
}

// cgroupProcs lists the processes in the cgroup directory dir and every
// group below it, sorted by pid. A missing dir (no live process) is empty;
// processes that exit while being read are left out.
func cgroupProcs(proc, dir string) ([]Process, error) {
	out := []Process{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if !d.IsDir() {
			return nil
		}
		b, err := os.ReadFile(filepath.Join(path, "cgroup.procs"))
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("cgroup %s: %w", path, err)
		}
		for _, s := range strings.Fields(string(b)) {
			pid, err := strconv.Atoi(s)
			if err != nil {
				return fmt.Errorf("cgroup %s: procs entry %q: %w", path, s, err)
			}
			p, err := readProcess(proc, pid)
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
				continue
			}
			if err != nil {
				return err
			}
			p.Cgroup = path
			out = append(out, p)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PID < out[j].PID })
	return out, nil
}
