package rpc

import (
	"encoding/json"
	"time"

	"github.com/allox-os/allox/internal/limit"
)

// Workspace actions: agents, sessions, checkpoints, tracked processes, fences and turns.
const (
	ActionAgentCreate = "agent.create"
	ActionAgentGet    = "agent.get"
	ActionAgentList   = "agent.list"
	ActionAgentDelete = "agent.delete"
	// ActionAgentUpdate changes an agent's turn checkpoint policy (turn_checkpoints: true, false
	// or null for the daemon's default).
	ActionAgentUpdate = "agent.update"

	ActionSessionCreate   = "session.create"
	ActionSessionGet      = "session.get"
	ActionSessionList     = "session.list"
	ActionSessionDelete   = "session.delete"
	ActionSessionRollback = "session.rollback"
	ActionSessionFence    = "session.fence"
	// ActionSessionUpdate changes a session's turn checkpoint policy (turn_checkpoints: true,
	// false or null for its agent's).
	ActionSessionUpdate = "session.update"
	// ActionSessionUnfence is accepted only on the host listener: the control plane lifts fences,
	// never a process inside the guest.
	ActionSessionUnfence = "session.unfence"
	// ActionSessionSSHAgent and ActionSessionSSHAgentConn are accepted only on the host listener:
	// SSH agent forwarding for a session (the Probe's SSH endpoint). The first makes an agent
	// socket for the session and streams one JSON line per connection a run makes to it
	// (SSHAgentEvent); the second carries one such connection (SSHAgentConnParams).
	ActionSessionSSHAgent     = "session.ssh_agent"
	ActionSessionSSHAgentConn = "session.ssh_agent_conn"

	ActionCheckpointCreate = "checkpoint.create"
	ActionCheckpointGet    = "checkpoint.get"
	ActionCheckpointList   = "checkpoint.list"
	ActionCheckpointDelete = "checkpoint.delete"

	ActionProcessStart  = "process.start"
	ActionProcessGet    = "process.get"
	ActionProcessWait   = "process.wait"
	ActionProcessKill   = "process.kill"
	ActionProcessList   = "process.list"
	ActionProcessOutput = "process.output"
	ActionProcessExec   = "process.exec"
	ActionProcessTree   = "process.tree"
	ActionProcessEvents = "process.events"

	// ActionSessionInfo is served only on a session's own socket: the caller's session as its
	// runs need it.
	ActionSessionInfo = "session.info"

	ActionTurnBegin = "turn.begin"
	ActionTurnEnd   = "turn.end"
	// ActionTurnList is a session's turn history.
	ActionTurnList = "turn.list"

	// ActionObserverAbort (host listener only, system-effects plugin) ends a run's observation as
	// if the observer had crashed: the session is fenced and the run killed.
	ActionObserverAbort = "observer.abort"
)

// Agent is a first-level Agent Workspace.
// agent.create's "shared": how the agent's runs see its shared/.
const (
	SharedReadOnly  = "ro"
	SharedReadWrite = "rw"
)

type Agent struct {
	AgentID   string    `json:"agent_id"`
	Created   time.Time `json:"created"`
	Workspace string    `json:"workspace"`
	Shared    string    `json:"shared"`
	// SharedMode is how the agent's runs see shared/: SharedReadOnly (the default) or
	// SharedReadWrite, agent.create's "shared".
	SharedMode      string `json:"shared_mode"`
	TurnCheckpoints bool   `json:"turn_checkpoints"`
	// Quota is the agent's space limit and usage (all its sessions); absent with quotas off.
	Quota *Quota `json:"quota,omitempty"`
}

// Quota is a space limit and its usage, in bytes, of one Btrfs qgroup of the store.
type Quota struct {
	Qgroup string `json:"qgroup"`          // e.g. "1/3"
	Limit  int64  `json:"limit,omitempty"` // absent: none
	// Used is what the qgroup is charged, as of the store's last transaction commit (at most 30 s
	// old): every byte its subvolumes wrote that one of them still holds.
	Used int64 `json:"used"`
	// Reserve is, for the store's qgroup, what all agents leave free for the daemon's state.
	Reserve int64 `json:"reserve,omitempty"`
	// Unlimited names what is outside the qgroup: an agent's "shared/" when it is an older,
	// non-empty plain directory (empty it, or delete and re-create the agent, to limit it).
	Unlimited []string `json:"unlimited,omitempty"`
}

// Session is a second-level Session Workspace with its status.
type Session struct {
	AgentID         string    `json:"agent_id"`
	SessionID       string    `json:"session_id"`
	Created         time.Time `json:"created"`
	Current         string    `json:"current"`
	Head            string    `json:"head,omitempty"` // the checkpoint current was last taken at or restored from
	LiveRuns        int       `json:"live_runs"`
	TurnCheckpoints bool      `json:"turn_checkpoints"`
	Fenced          *Fence    `json:"fenced,omitempty"`
	// Limits are the session's effective limits (the image's defaults with session.create's
	// overrides); absent when the daemon applies none.
	Limits *limit.Set `json:"limits,omitempty"`
	// Quota is the session's space limit and usage (current/ and all its checkpoints); absent
	// with quotas off.
	Quota *Quota `json:"quota,omitempty"`
	// CgroupFiles are the session group's limit and usage files as the kernel reports them
	// ("pids.max", "memory.max", "memory.swap.max", "cpu.weight", "pids.current", "pids.peak",
	// "memory.current", "memory.peak"); those that do not exist are left out, all of them until
	// the session's first run.
	CgroupFiles map[string]string `json:"cgroup_files,omitempty"`
	// Quarantine is set when the store could not finish the session's recovery: every operation
	// on it but session.delete fails with the code "quarantined".
	Quarantine *Quarantine `json:"quarantine,omitempty"`
	// Plugins is what the daemon's plugins report on the session, by plugin name (session-network:
	// its mode).
	Plugins map[string]json.RawMessage `json:"plugins,omitempty"`
}

// SessionInfo is session.info's result: the calling session, as its runs see it.
type SessionInfo struct {
	AgentID   string `json:"agent_id"`
	SessionID string `json:"session_id"`
	// Current is the session's workspace (a run's HOME and default cwd), AgentWorkspace the
	// agent's workspace and Shared its shared/ (read-only in runs), at the paths runs see them.
	Current        string `json:"current"`
	AgentWorkspace string `json:"agent_workspace"`
	Shared         string `json:"shared"`
	// Head is the checkpoint current/ was last taken at or restored from.
	Head string `json:"head,omitempty"`
	// TurnCheckpoints says whether turn.end with success checkpoints the session.
	TurnCheckpoints bool   `json:"turn_checkpoints"`
	Fenced          *Fence `json:"fenced,omitempty"`
	// Socket is where the session's runs reach the daemon; Actions what it serves there.
	Socket  string   `json:"socket"`
	Actions []string `json:"actions"`
}

// Turn is one agent turn in its session's history (turn.begin, turn.end, turn.list).
type Turn struct {
	TurnID string            `json:"turn_id"`
	Labels map[string]string `json:"labels,omitempty"`
	Begun  *time.Time        `json:"begun,omitempty"` // absent: turn.end came without a turn.begin
	Ended  *time.Time        `json:"ended,omitempty"` // absent: the turn is open
	// Outcome is "open", "succeeded" or "failed".
	Outcome string `json:"outcome"`
	// Checkpoint is the checkpoint the turn policy made at its end ("turn-<turn_id>").
	Checkpoint string `json:"checkpoint,omitempty"`
}

// Quarantine says why the store quarantined a session and since when.
type Quarantine struct {
	Reason string    `json:"reason"`
	Since  time.Time `json:"since"`
}

// LimitsParams are session.create's optional limits; each field is optional, sizes in bytes.
type LimitsParams struct {
	PidsMax       *int64 `json:"pids_max"`
	MemoryMax     *int64 `json:"memory_max"`
	MemorySwapMax *int64 `json:"memory_swap_max"`
	CPUWeight     *int64 `json:"cpu_weight"`
}

// Fence says why a session refuses state-changing operations.
type Fence struct {
	Reason   string    `json:"reason"`
	Evidence string    `json:"evidence,omitempty"`
	Since    time.Time `json:"since"`
}

// Checkpoint is a read-only snapshot of a session's current/, a node of the session's DAG.
type Checkpoint struct {
	AgentID      string            `json:"agent_id"`
	SessionID    string            `json:"session_id"`
	CheckpointID string            `json:"checkpoint_id"`
	Parent       string            `json:"parent,omitempty"`
	Labels       map[string]string `json:"labels,omitempty"`
	Pinned       bool              `json:"pinned"`
	Created      time.Time         `json:"created"`
}

// Run is a tracked process run.
type Run struct {
	RunID     string     `json:"run_id"`
	AgentID   string     `json:"agent_id"`
	SessionID string     `json:"session_id"`
	Argv      []string   `json:"argv"`
	State     string     `json:"state"` // running, exited, killed, timed_out, failed, oom_killed, pids_limit
	ExitCode  *int       `json:"exit_code,omitempty"`
	Signal    string     `json:"signal,omitempty"`
	Reason    string     `json:"reason,omitempty"`
	Pid       int        `json:"pid,omitempty"`
	Cgroup    string     `json:"cgroup,omitempty"`
	Started   time.Time  `json:"started"`
	Ended     *time.Time `json:"ended,omitempty"`
	// Managed says the run went the managed (unsandboxed) path.
	Managed bool `json:"managed,omitempty"`
	// Attached says the run's streams went to its process.exec caller, not to its record:
	// "pipes" or "terminal".
	Attached string `json:"attached,omitempty"`
	// StdoutDropped and StderrDropped are the bytes of each stream dropped beyond the daemon's
	// bound on run output, once the run has ended (process.output reports them live).
	StdoutDropped int64 `json:"stdout_dropped,omitempty"`
	StderrDropped int64 `json:"stderr_dropped,omitempty"`
	// Effects is the system-effects observer's report, for a run it watched.
	Effects *Effects `json:"effects,omitempty"`
	// Plugins is what the daemon's other plugins (Plugin API v1 run metadata) report on the run,
	// by plugin name.
	Plugins map[string]json.RawMessage `json:"plugins,omitempty"`
}

// Recovery in process.start params asks the system-effects observer for protocol v3: after the
// run, the Session Workspace is restored to the baseline checkpoint and the recovery is verified.
type Recovery struct {
	// ScrubRuntime also removes the run's runtime residue before the last capture (see the
	// observer's documentation for exactly what it touches).
	ScrubRuntime bool `json:"scrub_runtime"`
	// RequireConsistent (default true) fences the session unless the recovery verifier confirms
	// that everything observed is back to how it was before the run.
	RequireConsistent *bool `json:"require_consistent,omitempty"`
}

// Verdicts and evidence states of the system-effects observer.
const (
	VerdictConsistent   = "CONSISTENT"
	VerdictInconsistent = "INCONSISTENT"
	VerdictInconclusive = "INCONCLUSIVE"
	EvidenceComplete    = "COMPLETE"
	EvidenceIncomplete  = "INCOMPLETE"
)

// Effects is the system-effects observer's report on one run.
type Effects struct {
	Protocol     int    `json:"protocol"` // 2: A→B; 3: A→B, recovery, B→C and A→C
	Verdict      string `json:"verdict"`  // VerdictConsistent, VerdictInconsistent or VerdictInconclusive
	Evidence     string `json:"evidence"` // EvidenceComplete or EvidenceIncomplete
	EvidencePath string `json:"evidence_path"`
	// Report is the verifier's report file inside the evidence set ("" when no verifier ran).
	Report string `json:"report,omitempty"`
	// Domains maps each observed domain to its own verdict.
	Domains map[string]string `json:"domains,omitempty"`
	// CheckpointID is the baseline the recovery restored (protocol 3).
	CheckpointID string `json:"checkpoint_id,omitempty"`
	// Fenced says the session was fenced because of this run; Reason says why.
	Fenced bool   `json:"fenced"`
	Reason string `json:"reason,omitempty"`
	// StepsMs is how long each step of the observation took, in milliseconds: start (the observer
	// process and its history recorder), capture_a, capture_b, scrub, recover, capture_c, close,
	// verify.
	StepsMs map[string]float64 `json:"steps_ms,omitempty"`
}

// Output is a page of a run's stdout or stderr.
type Output struct {
	RunID  string `json:"run_id"`
	Stream string `json:"stream"`
	Offset int64  `json:"offset"`
	Next   int64  `json:"next"`
	EOF    bool   `json:"eof"`
	// Data is the page: the bytes themselves when Encoding is EncodingUTF8, their standard base64
	// when it is EncodingBase64 (always so with params.encoding "base64"; with the default "auto",
	// whenever the page is not valid UTF-8, so that no byte is ever lost).
	Data     string `json:"data"`
	Encoding string `json:"encoding"`
	// Truncated says the stream hit the daemon's bound on run output (16 MiB per stream by
	// default) and DroppedBytes how many bytes beyond it were dropped so far.
	Truncated    bool  `json:"truncated"`
	DroppedBytes int64 `json:"dropped_bytes"`
}

// Encodings of Output.Data and the values of process.output's params.encoding.
const (
	EncodingAuto   = "auto" // request only: utf-8 when the page is valid UTF-8, else base64
	EncodingUTF8   = "utf-8"
	EncodingBase64 = "base64"
)

// SSHAgentEvent is one line of session.ssh_agent's stream: the first names the agent socket
// (SSHAgent, given to process.start or process.exec as params.ssh_agent); every later one names a
// connection a run made to it (Conn), to be carried with session.ssh_agent_conn within
// SSHAgentClaimWithin or dropped.
type SSHAgentEvent struct {
	SSHAgent string `json:"ssh_agent,omitempty"`
	Conn     string `json:"conn,omitempty"`
}

// SSHAgentConnParams are session.ssh_agent_conn's.
type SSHAgentConnParams struct {
	AgentID   string `json:"agent_id"`
	SessionID string `json:"session_id"`
	SSHAgent  string `json:"ssh_agent"`
	Conn      string `json:"conn"`
}

// SSHAgentTarget is where a run started with params.ssh_agent finds the agent socket; its
// SSH_AUTH_SOCK names it.
const SSHAgentTarget = "/run/allox/ssh-agent.sock"
