package supervise

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// spawn starts the service's process through the reaper, its output on a pipe to the console.
// outDone is closed when every holder of the pipe has closed it.
func (v *service) spawn() (proc *os.Process, exit <-chan unix.WaitStatus, outDone <-chan struct{}, err error) {
	env := environ(v.sup.cfg.BaseEnv, v.spec.Env)
	path, err := lookPath(v.spec.Command[0], env)
	if err != nil {
		return nil, nil, nil, err
	}
	w, outDone, err := v.sup.output(v.spec.Name)
	if err != nil {
		return nil, nil, nil, err
	}
	defer w.Close()
	stdin, _ := os.Open(os.DevNull) // no /dev/null: the child gets a closed stdin
	if stdin != nil {
		defer stdin.Close()
	}
	attr := &os.ProcAttr{
		Dir:   "/",
		Env:   env,
		Files: []*os.File{stdin, w, w},
		Sys:   &syscall.SysProcAttr{Setsid: true},
	}
	if group := v.cgroup(); group != nil {
		defer group.Close()
		attr.Sys.UseCgroupFD, attr.Sys.CgroupFD = true, int(group.Fd())
	}
	// An oom_score_adj alone is inherited: the child is forked with init's own set to it (see
	// inheritOOMScoreAdj), so it has it from its first instruction without the trampoline, whose
	// start (init again, its Go runtime and package initialisers) cost 30-90 ms of a TCG boot's
	// path to ready. Only an open-file limit needs the trampoline: Go's fork restores the soft
	// limit init started with in every child, so the child cannot inherit one.
	exe, argv := path, v.spec.Command
	adj, trampoline := v.spec.OOMScoreAdj, v.spec.NoFile > 0 && v.sup.cfg.Trampoline != ""
	if trampoline {
		exe, argv = v.sup.cfg.Trampoline, trampolineArgv(&serviceLimits{v.spec.NoFile, v.spec.OOMScoreAdj}, path, v.spec.Command)
		adj = 0 // the trampoline sets it
	}
	var restoreErr error
	_, exit, err = v.sup.reaper.Start(func() (int, error) {
		// The reaper's lock is held: no other child of init is forked while init's own
		// oom_score_adj is the service's.
		if adj != 0 {
			restore, err := inheritOOMScoreAdj(adj)
			if err != nil {
				return 0, err
			}
			defer func() { restoreErr = restore() }()
		}
		p, err := os.StartProcess(exe, argv, attr)
		if err != nil {
			return 0, err
		}
		proc = p
		return p.Pid, nil
	})
	if restoreErr != nil {
		v.emit(Event{Kind: Warning, Err: restoreErr})
	}
	if err != nil {
		return nil, nil, nil, err
	}
	if v.spec.NoFile > 0 && !trampoline {
		if err := v.limit(proc.Pid); err != nil {
			v.emit(Event{Kind: Warning, PID: proc.Pid, Err: err})
		}
	}
	return proc, exit, outDone, nil
}

// selfOOMScoreAdj is init's own oom_score_adj, which fork copies into every child.
const selfOOMScoreAdj = "/proc/self/oom_score_adj"

// inheritOOMScoreAdj sets init's own oom_score_adj to adj for a fork and returns the function
// that puts the previous value back. Init itself is never chosen by the OOM killer whatever its
// value, and the caller holds the reaper's lock, through which every child of init is started.
func inheritOOMScoreAdj(adj int) (restore func() error, err error) {
	b, err := os.ReadFile(selfOOMScoreAdj)
	if err != nil {
		return nil, fmt.Errorf("oom_score_adj %d: %w", adj, err)
	}
	prev := strings.TrimSpace(string(b))
	if err := os.WriteFile(selfOOMScoreAdj, []byte(strconv.Itoa(adj)), 0); err != nil {
		return nil, fmt.Errorf("oom_score_adj %d: %w", adj, err)
	}
	return func() error {
		if err := os.WriteFile(selfOOMScoreAdj, []byte(prev), 0); err != nil {
			return fmt.Errorf("init's own oom_score_adj stays %d after a service's start, not %s: %w", adj, prev, err)
		}
		return nil
	}, nil
}

// cgroup opens the service's own cgroup, or returns nil (with a warning when one was configured).
func (v *service) cgroup() *os.File {
	if v.sup.cfg.CgroupDir == "" {
		return nil
	}
	f, err := os.Open(filepath.Join(v.sup.cfg.CgroupDir, v.spec.Name))
	var st unix.Statfs_t
	if err == nil {
		if err = unix.Fstatfs(int(f.Fd()), &st); err == nil && st.Type != unix.CGROUP2_SUPER_MAGIC {
			err = fmt.Errorf("%s is not on cgroup2", f.Name())
		}
	}
	if err != nil {
		if f != nil {
			f.Close()
		}
		v.emit(Event{Kind: Warning, Err: fmt.Errorf("own cgroup: %w; running in init's", err)})
		return nil
	}
	return f
}

// limit applies NoFile to the running process right after exec, when no Trampoline is
// configured (a service may run a few instructions with the default limit first).
func (v *service) limit(pid int) error {
	n := v.spec.NoFile
	if err := unix.Prlimit(pid, unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: n, Max: n}, nil); err != nil {
		return fmt.Errorf("RLIMIT_NOFILE %d: %w", n, err)
	}
	return nil
}

// environ is base overlaid with env, as sorted KEY=value: nothing of init's own environment.
func environ(base, env map[string]string) []string {
	m := map[string]string{}
	for k, v := range base {
		m[k] = v
	}
	for k, v := range env {
		m[k] = v
	}
	out := make([]string, 0, len(m))
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	slices.Sort(out)
	return out
}

// lookPath resolves a command name without a slash along the PATH in env.
func lookPath(name string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	var path string
	for _, kv := range env {
		if p, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = p
		}
	}
	for _, dir := range filepath.SplitList(path) {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: not found in PATH %s", name, path)
}
