package tracked

import (
	"context"
	"fmt"
	"github.com/allox-os/allox/internal/atomicfile"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Manager starts, tracks and kills sandboxed runs. It is safe for
// concurrent use.
type Manager struct {
	cfg Config
	cg  *cgroups
	ids idGen

	mu   sync.Mutex
	runs map[string]*run

	pruneMu sync.Mutex // one prune at a time

	// sandboxCmd builds a sandboxed run's launcher (boundaryCmd; the bench swaps in the previous
	// boundary to measure against it in the same run).
	sandboxCmd func(req *StartRequest, cwd, tmp string) (*launch, error)
}

// run is the in-memory side of one record.
type run struct {
	st         *Status
	group      string
	done       chan struct{}     // closed once st is final
	killReason string            // StateKilled or StateTimedOut, set before cgroup.kill
	out        [2]*boundedWriter // stdout, stderr while the run is live (nil for a recovered record)
	residueErr error             // the observer's failure to look at a managed run's leftovers
	ready      *os.File          // bwrap's --info-fd until its sandbox child exists (Start only)
}

// killGrace bounds how long the manager waits for a killed cgroup to empty.
const killGrace = 10 * time.Second

// NewManager checks bwrap and sets up the cgroup parent; it fails closed
// (ErrSandbox) if either is unusable. Runs recorded as running by a previous
// manager are killed and marked failed.
//
// It marks every descriptor the process holds from 3 on close-on-exec. Go opens all of its
// own so, but not those the process inherited, and neither Go's fork nor bwrap closes
// anything: whatever the daemon's parent left open (a harness's pipe, a file of its
// supervisor) would otherwise be open in every run.
func NewManager(cfg Config) (*Manager, error) {
	if err := cfg.normalize(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSandbox, err)
	}
	if err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return nil, fmt.Errorf("%w: mark inherited descriptors close-on-exec: %w", ErrSandbox, err)
	}
	// The records are the daemon's alone: no run needs to reach anything in them (a run's
	// private /tmp is staged in its session's directory).
	if err := os.MkdirAll(cfg.RecordsDir, 0o700); err != nil {
		return nil, fmt.Errorf("records dir: %w", err)
	}
	if err := os.Chmod(cfg.RecordsDir, 0o700); err != nil {
		return nil, fmt.Errorf("records dir: %w", err)
	}
	cg, err := newCgroups(&cfg)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSandbox, err)
	}
	m := &Manager{cfg: cfg, cg: cg, runs: map[string]*run{}}
	m.sandboxCmd = m.boundaryCmd
	if err := m.recover(); err != nil {
		return nil, err
	}
	m.pruneAll()
	return m, nil
}

// recover loads past records; a run still marked running belonged to a
// manager that died, so its group is killed and the record closed.
func (m *Manager) recover() error {
	sts, err := loadStatuses(m.cfg.RecordsDir)
	if err != nil {
		return fmt.Errorf("load run records: %w", err)
	}
	m.removeLeftovers(sts)
	for _, st := range sts {
		r := &run{st: st, group: m.cg.group(st.AgentID, st.SessionID, st.RunID), done: make(chan struct{})}
		close(r.done)
		if st.live() {
			ctx, cancel := context.WithTimeout(context.Background(), killGrace)
			_ = m.cg.killWait(ctx, r.group)
			cancel()
			_ = m.cg.remove(r.group)
			st.State, st.Reason, st.Ended = StateFailed, "manager restarted while the run was live; run killed", time.Now().UTC()
			if err := writeStatus(runDir(&m.cfg, st.RunID), st); err != nil {
				return fmt.Errorf("run record %s: %w", st.RunID, err)
			}
			m.notify(EventExit, st)
		}
		if st.Tmp != "" {
			_ = os.RemoveAll(st.Tmp) // a run the daemon died under did not sync it
		}
		m.runs[st.RunID] = r
	}
	return nil
}

// removeLeftovers removes what a daemon killed mid-way left in the records dir: run directories
// without a record (killed between making the directory and writing the record), temporary
// files of record writes, and the /tmp a record from before the staging moved kept beside it.
func (m *Manager) removeLeftovers(sts []*Status) {
	known := map[string]bool{}
	for _, st := range sts {
		known[st.RunID] = true
	}
	ents, _ := os.ReadDir(m.cfg.RecordsDir)
	for _, e := range ents {
		dir := filepath.Join(m.cfg.RecordsDir, e.Name())
		switch {
		case !e.IsDir() || !validRunID(e.Name()):
		case !known[e.Name()]:
			_ = os.RemoveAll(dir)
		default:
			_, _ = atomicfile.RemoveTemps(dir)
			_ = os.RemoveAll(filepath.Join(dir, "tmp"))
		}
	}
}

func (m *Manager) lookup(runID string) (*run, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.runs[runID]
	if !ok {
		return nil, fmt.Errorf("run %q: %w", runID, ErrNotFound)
	}
	return r, nil
}

// Get returns a copy of a run's status.
func (m *Manager) Get(runID string) (*Status, error) {
	r, err := m.lookup(runID)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return r.st.clone(), nil
}

// Wait blocks until the run has ended (its record is final) or ctx is done.
func (m *Manager) Wait(ctx context.Context, runID string) (*Status, error) {
	r, err := m.lookup(runID)
	if err != nil {
		return nil, err
	}
	select {
	case <-r.done:
		return m.Get(runID)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Kill kills the run's whole cgroup (cgroup.kill). Killing a run that has
// already ended is a no-op.
func (m *Manager) Kill(runID string) error {
	r, err := m.lookup(runID)
	if err != nil {
		return err
	}
	return m.killRun(r, StateKilled)
}

func (m *Manager) killRun(r *run, reason string) error {
	m.mu.Lock()
	if !r.st.live() {
		m.mu.Unlock()
		return nil
	}
	if r.killReason == "" {
		r.killReason = reason
	}
	m.mu.Unlock()
	if err := m.cg.kill(r.group); err != nil {
		return fmt.Errorf("kill run %s: %w", r.st.RunID, err)
	}
	return nil
}

// List returns the runs of an agent's session (all its sessions if
// sessionID is empty), oldest first.
func (m *Manager) List(agentID, sessionID string) ([]*Status, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*Status
	for _, r := range m.runs {
		if r.st.AgentID == agentID && (sessionID == "" || r.st.SessionID == sessionID) {
			out = append(out, r.st.clone())
		}
	}
	sortStatuses(out)
	return out, nil
}

// Active is the number of live runs of a session: its execution lease.
func (m *Manager) Active(agentID, sessionID string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, r := range m.runs {
		if r.st.AgentID == agentID && r.st.SessionID == sessionID && r.st.live() {
			n++
		}
	}
	return n
}

// KillSession kills the session's cgroup (every run and every descendant),
// waits until it is empty and the runs' records are final. Without a
// deadline in ctx the wait is bounded by killGrace.
func (m *Manager) KillSession(ctx context.Context, agentID, sessionID string) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, killGrace)
		defer cancel()
	}
	var live []*run
	m.mu.Lock()
	for _, r := range m.runs {
		if r.st.AgentID == agentID && r.st.SessionID == sessionID && r.st.live() {
			if r.killReason == "" {
				r.killReason = StateKilled
			}
			live = append(live, r)
		}
	}
	m.mu.Unlock()
	if err := m.cg.killWait(ctx, m.cg.group(agentID, sessionID)); err != nil {
		return fmt.Errorf("kill session %s/%s: %w", agentID, sessionID, err)
	}
	for _, r := range live {
		select {
		case <-r.done:
		case <-ctx.Done():
			return fmt.Errorf("kill session %s/%s: run %s: %w", agentID, sessionID, r.st.RunID, ctx.Err())
		}
	}
	return nil
}

// TmpDir is a run's private /tmp staging directory, in its session's .run-tmp/ (gone once the
// run's record is final); "" for a run the manager does not know.
func (m *Manager) TmpDir(runID string) string {
	r, err := m.lookup(runID)
	if err != nil {
		return ""
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return r.st.Tmp
}

// CgroupDir returns the absolute cgroup v2 directory of a session
// (runID empty) or of one of its runs. The directory exists only while
// processes of the session or run may be live.
func (m *Manager) CgroupDir(agentID, sessionID, runID string) string {
	if runID == "" {
		return m.cg.path(m.cg.group(agentID, sessionID))
	}
	return m.cg.path(m.cg.group(agentID, sessionID, runID))
}

// ParentDir is the absolute cgroup v2 directory that holds every agent's, session's and run's
// group (the place for guards that every run must inherit).
func (m *Manager) ParentDir() string { return m.cg.path(m.cg.parent) }

// Own makes dir (a session's current/) belong to the runs' identity.
func (m *Manager) Own(dir string) error { return ownTo(dir, m.cfg.RunUID, m.cfg.RunGID) }

// Identity is the uid and gid of every sandboxed run.
func (m *Manager) Identity() (uid, gid uint32) { return m.cfg.RunUID, m.cfg.RunGID }

// traversable checks that uid:gid (no supplementary groups) may search every directory from /
// down to dir, as bwrap, already that identity, must to bind a run's private /tmp from it.
func traversable(dir string, uid, gid uint32) error {
	for d := dir; ; d = filepath.Dir(d) {
		var st unix.Stat_t
		if err := unix.Stat(d, &st); err != nil {
			return err
		}
		bit := uint32(0o001)
		switch {
		case st.Uid == uid:
			bit = 0o100
		case st.Gid == gid:
			bit = 0o010
		}
		if st.Mode&bit == 0 {
			return fmt.Errorf("%s (mode %#o, %d:%d) cannot be searched by the runs' uid %d: run chmod o+x %s", d, st.Mode&0o7777, st.Uid, st.Gid, uid, d)
		}
		if d == "/" {
			return nil
		}
	}
}

// RunOfPID names the run the process pid is in (its cgroup v2 group, from /proc/<pid>/cgroup, is
// one of this manager's run groups), or "" when it is in none: how a session socket's caller is
// attributed to its run.
func (m *Manager) RunOfPID(pid int) (agent, session, run string) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cgroup"))
	if err != nil {
		return "", "", ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		group, ok := strings.CutPrefix(line, "0::")
		if !ok {
			continue
		}
		// A run's processes may be in groups below its own (the agent's own sub-groups).
		for g := group; g != "/" && g != "."; g = filepath.Dir(g) {
			if a, s, ok := m.cg.split(g); ok {
				parts := strings.Split(strings.TrimPrefix(g, m.cg.parent+"/"), "/")
				if _, err := m.lookup(parts[2]); err == nil {
					return a, s, parts[2]
				}
				return "", "", ""
			}
		}
	}
	return "", "", ""
}
