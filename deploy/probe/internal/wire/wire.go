// Package wire holds the contract between the Gateway and its Probes: what a Probe sends when it
// registers and heartbeats, the intents it pulls, and the events it reports. The Probe pulls over
// mutual TLS (it needs no inbound port); every intent and event carries a trace id.
package wire

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"time"

	"github.com/allox-os/allox/deploy/probe/internal/lease"
	"github.com/allox-os/allox/deploy/probe/internal/spec"
)

// Paths of the Probe-facing API (client certificate with OU=probe and CN=host).
const (
	PathRegister  = "/v1/probe/register"
	PathHeartbeat = "/v1/probe/heartbeat"
	PathIntents   = "/v1/probe/intents"
	PathEvents    = "/v1/probe/events"
)

// Paths of the operator API (client certificate with OU=admin).
const (
	PathApply    = "/v1/apply"
	PathDevBoxes = "/v1/devboxes"
	PathOps      = "/v1/ops"
	PathLeases   = "/v1/leases"
	PathAudit    = "/v1/audit"
	PathSSHCert  = "/v1/ssh-cert"
)

// HeaderTrace carries the trace id of a request and its reply.
const HeaderTrace = "Allox-Trace-Id"

// Certificate organisational units: the role a client certificate grants.
const (
	RoleProbe = "probe"
	RoleAdmin = "admin"
)

// NewTraceID returns 16 random bytes in hex, as in a W3C trace-id.
func NewTraceID() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Capacity is how many Worker Sandboxes a host takes and runs.
type Capacity struct {
	Slots int `json:"slots"`
	Used  int `json:"used"`
}

// Capabilities is what a host and its appliances can do, for the Gateway's registry.
type Capabilities struct {
	Accel        string   `json:"accel"` // kvm or tcg
	AccelReason  string   `json:"accel_reason,omitempty"`
	Runtimes     []string `json:"runtimes"`           // spec.RuntimeQEMU, spec.RuntimeProcess
	Kernel       string   `json:"kernel"`             // host kernel release
	Features     []string `json:"features,omitempty"` // host kernel features (btrfs, cgroup2, vsock...)
	Plugins      []string `json:"plugins,omitempty"`  // appliance plugins installed
	NetworkModes []string `json:"network_modes,omitempty"`
	Channels     []string `json:"channels,omitempty"` // channel adapters (issue 21: ssh_remote, dialog)
}

// Register is a Probe's registration; the reply is a lease.Grant with a new epoch.
type Register struct {
	Host         string       `json:"host"`
	Capacity     Capacity     `json:"capacity"`
	Capabilities Capabilities `json:"capabilities"`
}

// Heartbeat renews the lease of epoch and reports health; the reply is the renewed lease.Grant.
type Heartbeat struct {
	Host     string   `json:"host"`
	Epoch    int64    `json:"epoch"`
	Capacity Capacity `json:"capacity"`
	Healthy  bool     `json:"healthy"`
	Detail   string   `json:"detail,omitempty"`
}

// Intent kinds.
const (
	IntentBoot       = "boot"        // run the DevBox: boot its sandbox, create agent and sessions
	IntentStop       = "stop"        // stop the DevBox's sandbox
	IntentCheckpoint = "checkpoint"  // checkpoint a session through the appliance
	IntentRollback   = "rollback"    // roll a session back to a checkpoint
	IntentSnapshot   = "vm_snapshot" // VM-level snapshot through QMP
)

// Intent is an authorised desired-state change for one host, valid only under Epoch.
type Intent struct {
	ID         string       `json:"id"`
	Host       string       `json:"host"`
	Epoch      int64        `json:"epoch"`
	Kind       string       `json:"kind"`
	DevBox     string       `json:"devbox"`
	Spec       *spec.DevBox `json:"spec,omitempty"`
	Session    string       `json:"session,omitempty"`
	Checkpoint string       `json:"checkpoint,omitempty"`
	Task       *TaskSpec    `json:"task,omitempty"` // IntentTask: metadata only, the prompt is fetched
	TraceID    string       `json:"trace_id"`
	Issued     time.Time    `json:"issued"`
}

// Intents is the reply to a pull: the host's pending intents and the revision to pull after.
type Intents struct {
	Intents  []Intent `json:"intents"`
	Revision int64    `json:"revision"`
}

// Event kinds.
const (
	EventIntentDone   = "intent.done"
	EventIntentFailed = "intent.failed"
	EventPhase        = "phase"      // observed phase of a DevBox or session
	EventFault        = "fault"      // a local fault and what self-heal did about it
	EventEscalation   = "escalation" // local recovery gave up: the Gateway decides
	EventFence        = "fence"      // the Probe fenced its sessions
	EventActivity     = "activity"   // a channel's connection or channel ended: who, what, when (metadata)
	// EventAgentStatus: an agent adapter's CLI changed status (Phase: one of the Agent* values).
	EventAgentStatus = "agent.status"
)

// Agent adapter statuses (EventAgentStatus's Phase).
const (
	AgentWorking  = "working"
	AgentIdle     = "idle"
	AgentApproval = "waiting_for_approval"
	AgentDone     = "done"
	AgentFailed   = "failed"
)

// Observed phases.
const (
	PhaseBooting  = "booting"
	PhaseRunning  = "running"
	PhaseDegraded = "degraded"
	PhaseFenced   = "fenced"
	PhaseStopped  = "stopped"
	PhaseFailed   = "failed"
)

// Event is what a Probe reports. Metadata only: never workspace content.
type Event struct {
	Kind     string          `json:"kind"`
	Epoch    int64           `json:"epoch"`
	IntentID string          `json:"intent_id,omitempty"`
	DevBox   string          `json:"devbox,omitempty"`
	Session  string          `json:"session,omitempty"`
	Phase    string          `json:"phase,omitempty"`
	Reason   string          `json:"reason,omitempty"`
	Result   json.RawMessage `json:"result,omitempty"`
	TraceID  string          `json:"trace_id"`
	At       time.Time       `json:"at"`
}

// Events is a batch of events.
type Events struct {
	Host   string  `json:"host"`
	Epoch  int64   `json:"epoch"`
	Events []Event `json:"events"`
}

// Grant is the lease a registration or heartbeat returns.
type Grant = lease.Grant

// Apply is an operator's apply of DevBox specs.
type Apply struct {
	DevBoxes []spec.DevBox `json:"devboxes"`
	Reason   string        `json:"reason,omitempty"`
}

// Op is an operator's request on a running DevBox's session.
type Op struct {
	DevBox     string `json:"devbox"`
	Kind       string `json:"kind"` // IntentCheckpoint, IntentRollback, IntentSnapshot
	Session    string `json:"session,omitempty"`
	Checkpoint string `json:"checkpoint,omitempty"`
	Approval   string `json:"approval,omitempty"`
	Reason     string `json:"reason,omitempty"`
}

// SSHCertRequest asks the Gateway for a short-lived SSH credential to one session of a DevBox
// (ssh_remote): after its approval decision it signs PublicKey (authorized_keys form) for the
// session's principal.
type SSHCertRequest struct {
	DevBox    string `json:"devbox"`
	Session   string `json:"session"`
	PublicKey string `json:"public_key"`
	// Who names the person (the certificate's key id, in every activity the Probe reports).
	Who      string `json:"who"`
	Approval string `json:"approval"`
	Reason   string `json:"reason,omitempty"`
	// TTLSeconds is the certificate's validity (0: 15 minutes).
	TTLSeconds     int  `json:"ttl_seconds,omitempty"`
	PTY            bool `json:"pty,omitempty"`
	PortForwarding bool `json:"port_forwarding,omitempty"`
	// AgentForwarding permits ssh -A: the session's runs of the connection use the client's agent.
	AgentForwarding bool `json:"agent_forwarding,omitempty"`
}

// SSHCert is the signed certificate, in authorized_keys form, and the login it is for.
type SSHCert struct {
	Certificate string    `json:"certificate"`
	Login       string    `json:"login"`
	ValidBefore time.Time `json:"valid_before"`
}

// OpResult is the outcome of an Op, once its Probe reported it.
type OpResult struct {
	ID     string          `json:"id"`
	Done   bool            `json:"done"`
	Failed string          `json:"failed,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
}

// Placement says which host runs a DevBox under which epoch, for which spec revision.
type Placement struct {
	DevBox     string `json:"devbox"`
	Host       string `json:"host"`
	Epoch      int64  `json:"epoch"`
	Generation int64  `json:"generation"`
	Stopping   bool   `json:"stopping,omitempty"`
}

// Observed is what the Probes last reported of a DevBox.
type Observed struct {
	Phase    string            `json:"phase"`
	Host     string            `json:"host"`
	Epoch    int64             `json:"epoch"`
	Reason   string            `json:"reason,omitempty"`
	Sessions map[string]string `json:"sessions,omitempty"` // session → phase
	// Agents is each session's agent adapter, as its status events last said.
	Agents map[string]AgentObserved `json:"agents,omitempty"`
	At     time.Time                `json:"at"`
}

// DevBoxStatus is get's reply.
type DevBoxStatus struct {
	Spec       spec.DevBox `json:"spec"`
	Generation int64       `json:"generation"`
	Placement  *Placement  `json:"placement,omitempty"`
	Observed   *Observed   `json:"observed,omitempty"`
}

// LeaseStatus is a host's lease as the Gateway holds it.
type LeaseStatus struct {
	Host         string       `json:"host"`
	Epoch        int64        `json:"epoch"`
	TTL          int64        `json:"ttl_seconds"`
	Capacity     Capacity     `json:"capacity"`
	Capabilities Capabilities `json:"capabilities"`
	Healthy      bool         `json:"healthy"`
}

// Error is the body of a refused request.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Field   string `json:"field,omitempty"`
}
