package tracked

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/allox-os/allox/internal/limit"
)

// limitConfig is what the groups are limited by: every run's defaults and, per session, the
// session's own limits (the workspace's persisted choice, looked up whenever a run group is made,
// so that a session group re-created after a restart gets them again).
type limitConfig struct {
	run     limit.Set
	session func(agent, session string) (limit.Set, error)
}

// limitFiles maps each limit to its cgroup file and controller.
var limitFiles = []struct{ field, file, controller, unset string }{
	{limit.PidsMax, "pids.max", "pids", "max"},
	{limit.MemoryMax, "memory.max", "memory", "max"},
	{limit.MemorySwapMax, "memory.swap.max", "memory", "max"},
	{limit.CPUWeight, "cpu.weight", "cpu", "100"},
}

// delegated are the controllers enabled down the tree to the run groups.
var delegated = []string{"cpu", "memory", "pids"}

func (c *cgroups) session(agent, session string) (limit.Set, error) {
	if c.limits.session == nil {
		return limit.Set{}, nil
	}
	s, err := c.limits.session(agent, session)
	if err != nil {
		return limit.Set{}, fmt.Errorf("limits of session %s/%s: %w", agent, session, err)
	}
	return s, nil
}

// runLimits are the run defaults capped by the session's limits.
func (c *cgroups) runLimits(session limit.Set) limit.Set { return limit.Cap(c.limits.run, session) }

// Enforced lists the limits that really apply here: those whose controller the parent group has
// and whose file exists (memory.swap.max needs swap in the kernel).
func (c *cgroups) enforced() []string {
	var out []string
	for _, lf := range limitFiles {
		if c.has(lf.controller) && exists(filepath.Join(c.path(c.parent), lf.file)) {
			out = append(out, lf.field)
		}
	}
	return out
}

func (c *cgroups) has(controller string) bool { return c.controllers[controller] }

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

// setup makes the run group below its agent and session groups: at each level it enables the
// delegated controllers for the level below (the groups above the runs never hold processes), it
// writes the session's limits into the session group every time (so a re-created group gets them
// again) and the run's limits, with memory.oom.group, into the new run group.
func (c *cgroups) setup(group string, sess, run limit.Set) error {
	agent, session, _ := c.split(group)
	sessionGroup := c.group(agent, session)
	for _, g := range []string{c.parent, c.group(agent), sessionGroup} {
		if g != c.parent {
			if err := os.Mkdir(c.path(g), 0o755); err != nil && !errors.Is(err, os.ErrExist) {
				return err
			}
		}
		if g == sessionGroup {
			if err := c.writeLimits(g, sess); err != nil {
				return err
			}
		}
		if err := c.delegate(g); err != nil {
			return err
		}
	}
	if err := os.Mkdir(c.path(group), 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	if err := c.writeLimits(group, run); err != nil {
		return err
	}
	if c.has("memory") {
		// The whole run is the OOM killer's victim, not one of its processes.
		return c.write(group, "memory.oom.group", "1")
	}
	return nil
}

// delegate enables the available delegated controllers in group's cgroup.subtree_control.
func (c *cgroups) delegate(group string) error {
	var words []string
	for _, name := range delegated {
		if c.has(name) {
			words = append(words, "+"+name)
		}
	}
	if len(words) == 0 {
		return nil
	}
	return c.write(group, "cgroup.subtree_control", strings.Join(words, " "))
}

// writeLimits writes each limit that applies here; an unset one is written as its default, so a
// group never keeps an older value.
func (c *cgroups) writeLimits(group string, s limit.Set) error {
	enforced := c.enforced()
	for _, lf := range limitFiles {
		if !slices.Contains(enforced, lf.field) {
			continue
		}
		val := lf.unset
		if v, ok := s.Get(lf.field); ok {
			val = strconv.FormatInt(v, 10)
		}
		if err := c.write(group, lf.file, val); err != nil {
			return err
		}
	}
	return nil
}

func (c *cgroups) write(group, file, val string) error {
	if err := os.WriteFile(filepath.Join(c.path(group), file), []byte(val), 0o644); err != nil {
		return fmt.Errorf("write %s %s: %w", file, val, err)
	}
	return nil
}

// reserve bounds all runs together: the parent group's memory.max becomes MemTotal minus reserve,
// so that the runs cannot push the control plane into a global OOM. 0 leaves the parent alone.
func (c *cgroups) reserve(reserve int64) error {
	if reserve <= 0 || !c.has("memory") {
		return nil
	}
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return err
	}
	defer f.Close()
	total, err := memTotal(f)
	if err != nil {
		return err
	}
	max := total - reserve
	if max < limit.MinMemory {
		return fmt.Errorf("runs memory reserve %s leaves %s of the guest's %s for all runs: lower the reserve (--runs-memory-reserve) or give the guest more memory",
			limit.FormatSize(reserve), limit.FormatSize(max), limit.FormatSize(total))
	}
	return c.write(c.parent, "memory.max", strconv.FormatInt(max, 10))
}

// memTotal reads MemTotal (bytes) from /proc/meminfo.
func memTotal(r io.Reader) (int64, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:")
		if !ok {
			continue
		}
		kb, ok := strings.CutSuffix(strings.TrimSpace(rest), " kB")
		n, err := strconv.ParseInt(strings.TrimSpace(kb), 10, 64)
		if !ok || err != nil {
			return 0, fmt.Errorf("meminfo: malformed line %q", sc.Text())
		}
		return n << 10, nil
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, errors.New("meminfo: no MemTotal line")
}

// parseKeyed reads a flat keyed cgroup file ("oom_kill 1\nmax 0\n": memory.events, pids.events).
func parseKeyed(r io.Reader) (map[string]int64, error) {
	out := map[string]int64{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if len(f) != 2 {
			return nil, fmt.Errorf("malformed line %q: want \"key value\"", sc.Text())
		}
		n, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("line %q: %w", sc.Text(), err)
		}
		out[f[0]] = n
	}
	return out, sc.Err()
}

// limitEvents are the counters that say a run hit a limit.
type limitEvents struct {
	OOMKills  int64 // memory.events oom_kill: processes killed by the OOM killer
	PidsLimit int64 // pids.events max: forks refused by pids.max
}

// events reads a run group's limit counters before it is removed; missing files count as zero.
func (c *cgroups) events(group string) (limitEvents, error) {
	var ev limitEvents
	var errs []error
	for _, f := range []struct {
		file, key string
		dst       *int64
	}{{"memory.events", "oom_kill", &ev.OOMKills}, {"pids.events", "max", &ev.PidsLimit}} {
		b, err := os.Open(filepath.Join(c.path(group), f.file))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		m, err := parseKeyed(b)
		b.Close()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", f.file, err))
		}
		*f.dst = m[f.key]
	}
	return ev, errors.Join(errs...)
}

// applyEvents turns a run that hit a limit into StateOOMKilled or StatePidsLimit. The OOM killer
// is decisive: with memory.oom.group the whole run was killed. Refused forks are decisive for a run
// that did not succeed — a non-zero exit, a signal, or its timeout (a fork bomb is bounded, not
// ended, by pids.max: bwrap's init reaps the bomb's orphans until something kills the run) — but
// not for one killed on request (process.kill, a session kill), and a run that hit pids.max and
// still exited 0 keeps StateExited, with the count in its reason.
func applyEvents(st *Status, ev limitEvents, killReason string) {
	failed := st.State == StateExited && st.ExitCode != 0 || st.State == StateTimedOut ||
		st.State == StateKilled && killReason == ""
	switch {
	case ev.OOMKills > 0:
		st.State = StateOOMKilled
		st.Reason = joinReason(fmt.Sprintf("memory.max reached: %d process(es) killed by the OOM killer, the whole run with them", ev.OOMKills), st.Reason)
	case ev.PidsLimit > 0 && failed:
		st.State = StatePidsLimit
		st.Reason = joinReason(fmt.Sprintf("pids.max reached: %d fork(s) refused", ev.PidsLimit), st.Reason)
	case ev.PidsLimit > 0:
		st.Reason = joinReason(st.Reason, fmt.Sprintf("pids.max reached: %d fork(s) refused", ev.PidsLimit))
	}
}

// RunOOMScoreAdj is every run's oom_score_adj. The daemon writes it with CAP_SYS_RESOURCE, which
// makes it the run's floor too: an unprivileged process cannot go below it (the daemon itself runs
// at -997, which its runs would otherwise inherit).
const RunOOMScoreAdj = 500

// oomScoreAdj writes adj for every process in the group until a pass finds nothing left to
// change, so that a process forked while it runs is caught by the next pass.
func (c *cgroups) oomScoreAdj(group string, adj int) error {
	want := strconv.Itoa(adj)
	for pass := 0; pass < 100; pass++ {
		b, err := os.ReadFile(filepath.Join(c.path(group), "cgroup.procs"))
		if err != nil {
			return fmt.Errorf("oom_score_adj: %w", err)
		}
		changed := false
		for _, pid := range strings.Fields(string(b)) {
			file := filepath.Join("/proc", pid, "oom_score_adj")
			cur, err := os.ReadFile(file)
			if errors.Is(err, os.ErrNotExist) {
				continue // exited
			}
			if err == nil && strings.TrimSpace(string(cur)) == want {
				continue
			}
			if err := os.WriteFile(file, []byte(want), 0); err != nil && !errors.Is(err, os.ErrNotExist) && !errors.Is(err, syscall.ESRCH) {
				return fmt.Errorf("oom_score_adj of pid %s: %w", pid, err)
			}
			changed = true
		}
		if !changed {
			return nil
		}
	}
	return errors.New("oom_score_adj: the run's processes keep changing")
}

// Enforced lists the limits that apply on this machine, in limit.Fields order.
func (m *Manager) Enforced() []string { return m.cg.enforced() }

// Controllers lists the controllers delegated to the runs that the parent group has.
func (m *Manager) Controllers() []string {
	var out []string
	for _, name := range delegated {
		if m.cg.has(name) {
			out = append(out, name)
		}
	}
	return out
}

// RunLimits are the defaults of every run.
func (m *Manager) RunLimits() limit.Set { return m.cfg.RunLimits }

// GroupFiles reads back the limit files (and pids.current, pids.peak, memory.current,
// memory.peak) of a session's group, or of a run's when runID is set, as the kernel reports them;
// files that do not exist (no controller, no group yet) are left out.
func (m *Manager) GroupFiles(agentID, sessionID, runID string) map[string]string {
	dir := m.CgroupDir(agentID, sessionID, runID)
	out := map[string]string{}
	files := []string{"pids.current", "pids.peak", "memory.current", "memory.peak", "memory.oom.group"}
	for _, lf := range limitFiles {
		files = append(files, lf.file)
	}
	for _, f := range files {
		if b, err := os.ReadFile(filepath.Join(dir, f)); err == nil {
			out[f] = strings.TrimSpace(string(b))
		}
	}
	return out
}

// RunsMemoryMax is the parent group's memory.max ("max" when not bounded, "" without the memory
// controller).
func (m *Manager) RunsMemoryMax() string {
	b, err := os.ReadFile(filepath.Join(m.cg.path(m.cg.parent), "memory.max"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
