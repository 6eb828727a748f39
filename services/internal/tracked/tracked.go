// Package tracked runs agent commands as sandboxed, cgroup-tracked runs.
//
// Each run gets its own cgroup v2 group <mount>/<parent>/<agent>/<session>/<run>
// and is started inside it (clone3 CLONE_INTO_CGROUP, so even bwrap never runs
// outside the group). Bubblewrap gives the run new PID, IPC, UTS (and, where
// possible, cgroup) namespaces, a minimal read-only file view of the system
// directories, the session's current/ as the writable tree, the agent's
// shared/ (read-only unless configured), a private /tmp and no capabilities.
// Setup failures fail closed: a run never starts without its sandbox.
//
// Design decisions:
//   - Placement: bwrap is cloned straight into the run group with
//     SysProcAttr.UseCgroupFD (clone3 CLONE_INTO_CGROUP); no re-exec helper,
//     no window in which a process of the run lives outside its group.
//   - Release: bwrap waits on --block-fd until every hook of the run
//     (StartRequest.Hooks: the daemon's plugins, e.g. the eBPF process tracker
//     registering the run) has taken its first look, with the run's cgroup
//     frozen; a hook's error kills the run's cgroup before the command ever
//     runs.
//   - Lifetime: --die-with-parent plus Pdeathsig on bwrap, so runs die with
//     the daemon. Background servers started by the agent end with their run
//     anyway (the PID namespace dies with its init), so the pitfall of
//     --die-with-parent killing them adds nothing; a restarted manager kills
//     and closes runs it finds recorded as running.
//   - shared/ is bound read-only unless the run's Workspace.SharedWritable
//     (its agent's choice) or Config.SharedWritable: current/ is the only
//     writable tree by default, since shared/ is outside rollback.
//   - Limits: pids.max, memory.max, memory.swap.max and cpu.weight on the
//     session group (Config.SessionLimits, bounding all its runs together)
//     and on each run group (Config.RunLimits capped by the session's), with
//     cpu, memory and pids enabled down the tree and memory.oom.group on the
//     run, so an OOM kills the whole run. A run that hit a limit ends
//     StateOOMKilled or StatePidsLimit. Limits apply only where the
//     controller is available in the parent group (Manager.Enforced); on a
//     cgroup-hybrid host (no memory/pids in v2) they are skipped, while
//     cgroup.kill-based tracking still works. A group that cannot be created
//     or limited fails the run (ErrSandbox).
//   - Runs start with oom_score_adj RunOOMScoreAdj, written by the daemon
//     (so that is also their floor): they are the OOM killer's first choice
//     and cannot lower it to the daemon's protected value.
//   - Network: the namespace is the guest's unless Config.UnshareNet (a new one per run) or
//     Extra.NetNS (a session's own, kept by the session-network plugin). A run joins NetNS by
//     being forked from a thread inside it (netns.Do around cmd.Start): bubblewrap cannot join
//     an existing namespace (it only makes new ones), and a prefix running as the unprivileged
//     run uid cannot setns(2) into a namespace owned by the initial user namespace; the fork from
//     a thread in the namespace needs no privileged helper in the run's launch. The thread is
//     switched back and returned to the runtime, which keeps it for the daemon's life, so the
//     launcher's Pdeathsig (tied to the thread it was forked from) still means "the daemon died".
//     Only if switching back fails is the thread discarded: that kills the launcher (Pdeathsig)
//     and Start abandons the run (cgroup killed, ErrSandbox). The same holds for every run, in a
//     namespace or not: a goroutine of the daemon that ends while locked to a thread ends the
//     thread and kills every launcher forked from it, so code that locks a thread after runs have
//     started must unlock it (Pdeathsig stays: a managed run has no --die-with-parent, and without
//     it bwrap would outlive a crashed daemon until the next start's recovery).
//
// The package is domain code: it does not log and knows nothing about RPC.
package tracked

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Sentinel errors. Typed errors match them with errors.Is.
var (
	ErrNotFound = errors.New("run not found")
	ErrSandbox  = errors.New("sandbox setup failed")
	ErrInvalid  = errors.New("invalid request")
)

// InvalidError names the request field that is wrong and how to fix it.
type InvalidError struct {
	Field  string // argv, cwd, env, timeout, agent_id, session_id, workspace, stream, offset
	Reason string
}

func (e *InvalidError) Error() string { return fmt.Sprintf("invalid %s: %s", e.Field, e.Reason) }

// Is makes errors.Is(err, ErrInvalid) true.
func (e *InvalidError) Is(target error) bool { return target == ErrInvalid }

func invalid(field, format string, args ...any) error {
	return &InvalidError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// Run states.
const (
	StateRunning  = "running"
	StateExited   = "exited"
	StateKilled   = "killed"
	StateTimedOut = "timed_out"
	StateFailed   = "failed"
	// StateOOMKilled: the run's memory.events counted an OOM kill (memory.max of the run, its
	// session or all runs together); with memory.oom.group the whole run was killed.
	StateOOMKilled = "oom_killed"
	// StatePidsLimit: pids.max refused a fork of the run and the run then failed (exited non-zero
	// or died of a signal).
	StatePidsLimit = "pids_limit"
)

// Events passed to Config.Notify.
const (
	EventExit  = "process.exit"
	EventPrune = "process.prune"
)

// Workspace holds absolute host paths from the store.
type Workspace struct {
	Current  string // the session's current/ (writable, HOME and cwd)
	Shared   string // the agent's shared/ (ALLOX_AGENT_SHARED)
	AgentDir string // the agent's workspace/ (ALLOX_AGENT_WORKSPACE); not bound as a whole
	// SharedWritable binds shared/ writable into this run (its agent chose "shared": "rw") and
	// hands it to the run's identity; otherwise it is read-only unless Config.SharedWritable.
	SharedWritable bool
	// RunTmp is where the runs' private /tmp are staged, <RunTmp>/<run id>: on the session's own
	// filesystem (so the sync back into current/ can reflink) but outside current/ (so in no
	// checkpoint) and outside the records dir. "" means .run-tmp beside current/.
	RunTmp string
}

// runTmpRoot is the session's staging directory for private /tmp.
func (w Workspace) runTmpRoot() string {
	if w.RunTmp != "" {
		return w.RunTmp
	}
	return filepath.Join(filepath.Dir(w.Current), ".run-tmp")
}

// StartRequest describes one run.
type StartRequest struct {
	AgentID   string
	SessionID string
	Workspace Workspace
	Argv      []string
	Env       map[string]string
	Cwd       string // relative to Workspace.Current; must stay inside
	Stdin     []byte
	Timeout   time.Duration // 0 = none
	// Managed runs the command without bubblewrap: the seed's migration-period "managed" path. It
	// runs directly in its run cgroup with the daemon's privileges (the VM is its only boundary),
	// HOME and cwd in current/, TMPDIR=current/.allox-tmp (the system /tmp stays VM state), and
	// processes it leaves behind outlive its main process until the run's cgroup is killed. Only
	// with Config.AllowManaged; it exists so that the system-effects observer can watch agents
	// that really change the system.
	Managed bool
	// Hooks watch this run from before its command starts until after its last process has
	// exited (the daemon's plugins, e.g. the system-effects observer), in this order.
	Hooks []Hook
	// Extra is what the daemon's plugins (and its session socket) add to the run's sandbox.
	Extra Extra

	attach *attachment // StartAttached's streams; nil: Stdin and the record's output files
}

// Extra is what is added to a run beyond its request: the daemon's plugins' contributions and
// its own session socket and client, merged by the daemon (which refuses conflicts between them).
type Extra struct {
	// Prefix is wrapped around a sandboxed run's launch: Prefix[0] is started (in the run's
	// cgroup, as the run's identity, with the launcher's descriptors) with the rest of Prefix and
	// then bwrap's command line as its arguments, and must exec them, keeping its pid and its
	// descriptors. Managed runs have no sandbox launch and ignore it.
	Prefix []string
	// Env is set in the run's environment; the request's env may not name these variables.
	Env map[string]string
	// Mounts are bound into a sandboxed run (managed runs see the whole system anyway).
	Mounts []Mount
	// NetNS is the network namespace the run is started in, for a session's own network; nil:
	// the guest's (or, with Config.UnshareNet, a new one of bwrap's). The run's launcher (its
	// Prefix or bwrap, or a managed run's shell) is forked from a thread inside it, so the run and
	// every descendant live in it; bwrap then gets no --unshare-net. The manager does not close it.
	NetNS *os.File
}

// Mount is a bind mount into a sandboxed run. Source is a path on the guest that bwrap, already
// the run's identity, can reach (every directory above it traversable by that uid); Target an
// absolute path inside the sandbox, outside the workspace's paths, /proc, /dev and /tmp, whose
// missing parent directories bwrap creates.
type Mount struct {
	Source, Target string
	ReadOnly       bool
}

// Hook is one watcher of a run, by name (a daemon plugin's): what its Observer returns is the
// run's metadata under that name (Status.Meta).
type Hook struct {
	Name     string
	Observer Observer
	// Frozen asks for the run's cgroup to be frozen around Begin and End (and Residue), for an
	// observer that must see the sandbox still (the system-effects observer captures it). If any
	// hook of a run asks, all of its hooks see the group frozen. Freezing a sandbox that bwrap is
	// still setting up delays its start (by about 1 ms here: BenchmarkHooks), so hooks that need no still
	// sandbox leave it unset: they are called at the same two moments, before the command is
	// released (bwrap waits on its block fd) and after the group is empty.
	Frozen bool
}

// Observer watches one run. Begin is called with bwrap waiting on its block fd, in the order of
// StartRequest.Hooks; End once every process of the run has exited and the group is empty but
// still in place, in reverse order; both with the group frozen if a hook asks (Hook.Frozen).
type Observer interface {
	// Begin is called before the command is released. An error fails the start closed: the run's
	// cgroup is killed, the hooks that had begun see End (with that error as quiesce) and Start
	// returns ErrSandbox. What it returns is the hook's metadata while the run lives.
	Begin(st *Status) (json.RawMessage, error)
	// End is called after the last process of the run has exited and its private /tmp has been
	// synced into the workspace, before its cgroup is removed. quiesce is non-nil when the group
	// could not be emptied or frozen (or the start was abandoned): the observer must then treat
	// the run as a fault. End returns the hook's final metadata (nil keeps Begin's); an error is
	// recorded in the run's reason (the observer itself is responsible for fencing).
	End(st *Status, quiesce error) (json.RawMessage, error)
	// Residue is called when a managed run's main process has exited but other processes remain
	// in its group, with the group frozen, before they are killed. An error is recorded in the
	// run's reason.
	Residue(st *Status) error
}

// Status is a run record. It is persisted as JSON in Config.RecordsDir.
type Status struct {
	RunID     string    `json:"run_id"`
	AgentID   string    `json:"agent_id"`
	SessionID string    `json:"session_id"`
	Argv      []string  `json:"argv"`
	State     string    `json:"state"`
	ExitCode  int       `json:"exit_code"`
	Signal    string    `json:"signal,omitempty"`
	Started   time.Time `json:"started"`
	Ended     time.Time `json:"ended,omitzero"`
	Pid       int       `json:"pid,omitempty"`
	Cgroup    string    `json:"cgroup"`
	Reason    string    `json:"reason,omitempty"`
	// Managed says the run went the managed (unsandboxed) path.
	Managed bool `json:"managed,omitempty"`
	// Attached says the run's streams went to its caller (StartAttached), not to its record:
	// AttachedPipes or AttachedTerminal; empty for a run that kept its output.
	Attached string `json:"attached,omitempty"`
	// StdoutDropped and StderrDropped are the bytes of each stream beyond Config.MaxOutputBytes,
	// dropped (set once the run has ended; see Manager.Dropped for a live run).
	StdoutDropped int64 `json:"stdout_dropped,omitempty"`
	StderrDropped int64 `json:"stderr_dropped,omitempty"`
	// Meta is each hook's metadata on the run, by hook name (Hook.Name).
	Meta map[string]json.RawMessage `json:"meta,omitempty"`
	// Effects is the system-effects observer's report in records written before hooks had
	// names; it is only read (the daemon reports it as that plugin's metadata).
	Effects json.RawMessage `json:"effects,omitempty"`
	// Tmp is the staging directory of the run's private /tmp (removed when the run ends).
	Tmp string `json:"tmp,omitempty"`
}

// Status.Attached values.
const (
	AttachedPipes    = "pipes"
	AttachedTerminal = "terminal"
)

func (s *Status) clone() *Status {
	c := *s
	c.Argv = append([]string(nil), s.Argv...)
	c.Effects = append(json.RawMessage(nil), s.Effects...)
	if s.Meta != nil {
		c.Meta = make(map[string]json.RawMessage, len(s.Meta))
		for k, v := range s.Meta {
			c.Meta[k] = append(json.RawMessage(nil), v...)
		}
	}
	return &c
}

func (s *Status) live() bool { return s.State == StateRunning }
