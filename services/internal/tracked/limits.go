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

	"github.com/allox-os/allox/internal/cgroup"
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
var limitFiles = []struct{ field, file, controller string }{
	{limit.PidsMax, "pids.max", "pids"},
	{limit.MemoryMax, "memory.max", "memory"},
	{limit.MemorySwapMax, "memory.swap.max", "memory"},
	{limit.CPUWeight, "cpu.weight", "cpu"},
}

// delegated are the controllers enabled down the tree to the run groups (by cgroup.Create, for
// the limits it writes).
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
	parent, err := c.load(c.parent)
	if err != nil {
		return nil
	}
	var out []string
	for _, lf := range limitFiles {
		if c.has(lf.controller) && parent.Has(lf.file) {
			out = append(out, lf.field)
		}
	}
	return out
}

func (c *cgroups) has(controller string) bool { return c.controllers[controller] }

// toLimits are the limits of s that apply here, each unset one as the kernel's default, so that
// a group never keeps an older value. cgroup.Create enables, in every group above, the
// controllers of the limits it writes: the groups above the runs never hold processes.
func (c *cgroups) toLimits(s limit.Set) cgroup.Limits {
	enforced := c.enforced()
	val := func(field string, unset int64) *int64 {
		if !slices.Contains(enforced, field) {
			return nil
		}
		if v, ok := s.Get(field); ok {
			return &v
		}
		return &unset
	}
	l := cgroup.Limits{
		PidsMax:   val(limit.PidsMax, cgroup.NoLimit),
		MemoryMax: val(limit.MemoryMax, cgroup.NoLimit),
		SwapMax:   val(limit.MemorySwapMax, cgroup.NoLimit),
	}
	if w := val(limit.CPUWeight, 100); w != nil {
		u := uint64(*w)
		l.CPUWeight = &u
	}
	return l
}

// runGroupLimits are a run group's limits: run's, and with the memory controller
// memory.oom.group, so that the whole run is the OOM killer's victim, not one of its processes.
func (c *cgroups) runGroupLimits(run limit.Set) cgroup.Limits {
	l := c.toLimits(run)
	if c.has("memory") {
		yes := true
		l.OOMGroup = &yes
	}
	return l
}

// reserve bounds all runs together: the parent group's memory.max becomes MemTotal minus reserve,
// so that the runs cannot push the control plane into a global OOM. 0 leaves the parent alone.
func (c *cgroups) reserve(parent *cgroup.Group, reserve int64) error {
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
	return parent.Update(cgroup.Limits{MemoryMax: &max})
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

// limitEvents are the counters that say a run hit a limit.
type limitEvents = cgroup.Events

// events reads a run group's limit counters before it is removed; missing files count as zero.
func (c *cgroups) events(group string) (limitEvents, error) {
	g, err := c.load(group)
	if err != nil {
		return limitEvents{}, err
	}
	return g.Events()
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
	g, err := c.load(group)
	if err != nil {
		return err
	}
	want := strconv.Itoa(adj)
	for pass := 0; pass < 100; pass++ {
		pids, err := g.Procs()
		if err != nil {
			return fmt.Errorf("oom_score_adj: %w", err)
		}
		changed := false
		for _, pid := range pids {
			file := filepath.Join("/proc", strconv.FormatUint(pid, 10), "oom_score_adj")
			cur, err := os.ReadFile(file)
			if errors.Is(err, os.ErrNotExist) {
				continue // exited
			}
			if err == nil && strings.TrimSpace(string(cur)) == want {
				continue
			}
			if err := os.WriteFile(file, []byte(want), 0); err != nil && !errors.Is(err, os.ErrNotExist) && !errors.Is(err, syscall.ESRCH) {
				return fmt.Errorf("oom_score_adj of pid %d: %w", pid, err)
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
	out := map[string]string{}
	g, err := cgroup.At(m.CgroupDir(agentID, sessionID, runID))
	if err != nil {
		return out
	}
	files := []string{"pids.current", "pids.peak", "memory.current", "memory.peak", "memory.oom.group"}
	for _, lf := range limitFiles {
		files = append(files, lf.file)
	}
	for _, f := range files {
		if v, err := g.Read(f); err == nil {
			out[f] = v
		}
	}
	return out
}

// RunsMemoryMax is the parent group's memory.max ("max" when not bounded, "" without the memory
// controller).
func (m *Manager) RunsMemoryMax() string {
	g, err := m.cg.load(m.cg.parent)
	if err != nil {
		return ""
	}
	v, _ := g.Read("memory.max")
	return v
}
