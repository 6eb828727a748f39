// Package tracker answers the daemon's process-tracker API: the process tree
// of an agent's session (or one run) and its fork/exec/exit history.
//
// It has two sources. The cgroup source, always available, lists the live
// processes of the session's cgroup from /proc: exited processes and the
// history are not known. The ebpf source wraps a proctree.Collector: runs
// are registered with the collector through the tracked.Manager's gate,
// before their command is released, and every event of an attributed
// process is appended to a per-run JSONL record under the daemon's state
// directory (outside every workspace); the tree is folded from that record,
// so it includes exited processes and their exit codes.
//
// The package is domain code: it does not log and knows nothing about RPC.
package tracker

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/allox-os/allox/services/internal/tracked"
)

// Sources.
const (
	SourceCgroup = "cgroup"
	SourceEBPF   = "ebpf"
)

// Process states.
const (
	StateRunning = "running"
	StateExited  = "exited"
)

// Sentinel errors. Typed errors match them with errors.Is.
var (
	// ErrUnsupported means the answer needs the eBPF provider, which is not enabled.
	ErrUnsupported = errors.New("not supported by the process tracker's source")
	// ErrNotFound means the run is not one of the session's runs.
	ErrNotFound = errors.New("run not found in the session")
	// ErrInvalid is matched by InvalidError.
	ErrInvalid = errors.New("invalid request")
)

// InvalidError names the request field that is wrong and how to fix it.
type InvalidError struct {
	Field  string // agent_id, session_id, offset, limit
	Reason string
}

func (e *InvalidError) Error() string { return fmt.Sprintf("invalid %s: %s", e.Field, e.Reason) }

// Is makes errors.Is(err, ErrInvalid) true.
func (e *InvalidError) Is(target error) bool { return target == ErrInvalid }

// cgroupNote is the note of every cgroup-source answer.
const cgroupNote = "live processes only: the eBPF provider is not enabled (--process-tree-provider=ebpf)"

// Process is one process of a tree. Processes are identified by pid and
// start time: pids are reused, the pair is not.
type Process struct {
	PID             int      `json:"pid"`
	PPID            int      `json:"ppid"`
	StartTime       uint64   `json:"start_time_ns"` // cgroup: /proc starttime (boot clock, 10 ms ticks); ebpf: the task start_time (monotonic clock)
	ParentStartTime uint64   `json:"parent_start_time_ns,omitempty"`
	RunID           string   `json:"run_id,omitempty"`
	Root            bool     `json:"root,omitempty"` // the run's first process (bwrap), registered by the daemon
	Comm            string   `json:"comm,omitempty"`
	Exe             string   `json:"exe"`
	Argv            []string `json:"argv"`
	Cgroup          string   `json:"cgroup,omitempty"`
	State           string   `json:"state"`
	ExitCode        *int     `json:"exit_code,omitempty"`
	Signal          int      `json:"signal,omitempty"`
}

// Tree is the answer of Tracker.Tree.
type Tree struct {
	Source    string    `json:"source"`
	Complete  bool      `json:"complete"`
	Note      string    `json:"note,omitempty"`
	Drops     *uint64   `json:"drops,omitempty"`     // ebpf: events the kernel side lost since the provider loaded
	Truncated uint64    `json:"truncated,omitempty"` // ebpf: events not recorded because a run's record was full
	Processes []Process `json:"processes"`
}

// Page is the answer of Tracker.Events.
type Page struct {
	Source string  `json:"source"`
	Offset int     `json:"offset"`
	Next   int     `json:"next"`
	Events []Event `json:"events"`
}

// Tracker answers process.tree and process.events. The zero value is not
// usable; use New or NewEBPF.
type Tracker struct {
	runs Runs
	proc string // procfs mount, "/proc"
	ebpf *ebpfSource
}

// Runs are what the tracker reads of the daemon's runs (the workspace service is one).
type Runs interface {
	Run(runID string) (*tracked.Status, error)
	ListRuns(agentID, sessionID string) ([]*tracked.Status, error)
	CgroupDir(agentID, sessionID, runID string) string
}

// New returns a tracker with the cgroup source.
func New(runs Runs) *Tracker {
	return &Tracker{runs: runs, proc: "/proc"}
}

// Source returns SourceCgroup or SourceEBPF.
func (t *Tracker) Source() string {
	if t.ebpf != nil {
		return SourceEBPF
	}
	return SourceCgroup
}

// runIDs returns the ids of the session's runs (or just runID, checked to
// belong to the session), oldest first.
func (t *Tracker) runIDs(agentID, sessionID, runID string) ([]string, error) {
	if agentID == "" {
		return nil, &InvalidError{Field: "agent_id", Reason: "required"}
	}
	if sessionID == "" {
		return nil, &InvalidError{Field: "session_id", Reason: "required"}
	}
	if runID != "" {
		st, err := t.runs.Run(runID)
		if err != nil || st.AgentID != agentID || st.SessionID != sessionID {
			return nil, fmt.Errorf("run %q of %s/%s: %w", runID, agentID, sessionID, ErrNotFound)
		}
		return []string{runID}, nil
	}
	sts, err := t.runs.ListRuns(agentID, sessionID)
	if err != nil {
		return nil, err
	}
	ids := make([]string, 0, len(sts))
	for _, st := range sts {
		ids = append(ids, st.RunID)
	}
	return ids, nil
}

// Tree returns the processes of the session's runs (or of one run).
func (t *Tracker) Tree(agentID, sessionID, runID string) (*Tree, error) {
	ids, err := t.runIDs(agentID, sessionID, runID)
	if err != nil {
		return nil, err
	}
	if t.ebpf != nil {
		return t.ebpf.tree(ids)
	}
	session := t.runs.CgroupDir(agentID, sessionID, "")
	procs, err := cgroupProcs(t.proc, t.runs.CgroupDir(agentID, sessionID, runID))
	if err != nil {
		return nil, err
	}
	for i := range procs {
		if rel, err := filepath.Rel(session, procs[i].Cgroup); err == nil && filepath.IsLocal(rel) {
			procs[i].RunID, _, _ = strings.Cut(rel, "/")
		}
	}
	return &Tree{Source: SourceCgroup, Note: cgroupNote, Processes: procs}, nil
}

// Default and maximum page sizes of Events.
const (
	DefaultLimit = 1000
	MaxLimit     = 10000
)

// Events returns up to limit recorded events of the session's runs (or of
// one run) from offset, in record order. It needs the ebpf source.
func (t *Tracker) Events(agentID, sessionID, runID string, offset, limit int) (*Page, error) {
	if t.ebpf == nil {
		return nil, fmt.Errorf("process.events needs the eBPF process-tree provider: start the daemon with --process-tracker --process-tree-provider=ebpf: %w", ErrUnsupported)
	}
	if offset < 0 {
		return nil, &InvalidError{Field: "offset", Reason: fmt.Sprintf("%d: must be >= 0", offset)}
	}
	if limit < 0 || limit > MaxLimit {
		return nil, &InvalidError{Field: "limit", Reason: fmt.Sprintf("%d: must be between 0 (default %d) and %d", limit, DefaultLimit, MaxLimit)}
	}
	if limit == 0 {
		limit = DefaultLimit
	}
	ids, err := t.runIDs(agentID, sessionID, runID)
	if err != nil {
		return nil, err
	}
	evs, err := t.ebpf.page(ids, offset, limit)
	if err != nil {
		return nil, err
	}
	return &Page{Source: SourceEBPF, Offset: offset, Next: offset + len(evs), Events: evs}, nil
}
