package supervise

import (
	"errors"
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
	exe, argv := path, v.spec.Command
	limited := v.spec.NoFile > 0 || v.spec.OOMScoreAdj != 0
	if limited && v.sup.cfg.Trampoline != "" {
		exe, argv = v.sup.cfg.Trampoline, trampolineArgv(&serviceLimits{v.spec.NoFile, v.spec.OOMScoreAdj}, path, v.spec.Command)
	}
	_, exit, err = v.sup.reaper.Start(func() (int, error) {
		p, err := os.StartProcess(exe, argv, attr)
		if err != nil {
			return 0, err
		}
		proc = p
		return p.Pid, nil
	})
	if err != nil {
		return nil, nil, nil, err
	}
	if limited && v.sup.cfg.Trampoline == "" {
		if err := v.limit(proc.Pid); err != nil {
			v.emit(Event{Kind: Warning, PID: proc.Pid, Err: err})
		}
	}
	return proc, exit, outDone, nil
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

// limit applies NoFile and OOMScoreAdj to the running process right after exec, when no
// Trampoline is configured (a service may run a few instructions with the defaults first).
func (v *service) limit(pid int) error {
	var errs []error
	if n := v.spec.NoFile; n > 0 {
		if err := unix.Prlimit(pid, unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: n, Max: n}, nil); err != nil {
			errs = append(errs, fmt.Errorf("RLIMIT_NOFILE %d: %w", n, err))
		}
	}
	if adj := v.spec.OOMScoreAdj; adj != 0 {
		file := fmt.Sprintf("/proc/%d/oom_score_adj", pid)
		if err := os.WriteFile(file, []byte(strconv.Itoa(adj)), 0); err != nil {
			errs = append(errs, fmt.Errorf("oom_score_adj %d: %w", adj, err))
		}
	}
	return errors.Join(errs...)
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
