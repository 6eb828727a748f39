package spec

import (
	"github.com/allox-os/allox/internal/limit"
	"github.com/hashicorp/hcl/v2"
)

// Sandbox is the workspace daemon's sandbox block: the resource limits of sessions and runs, the
// memory all runs together leave to the control plane, and managed execution. mkimage renders it
// into the daemon's command line (see Flags); those flags may not be written into command by hand.
type Sandbox struct {
	// ManagedExecution allows process.start with managed: true (no bubblewrap; the VM is the only
	// boundary): --managed-execution.
	ManagedExecution bool `json:"managed_execution"`
	// SessionLimits are every session's defaults, RunLimits every run's (capped by its session's),
	// MaxLimits the bound of session.create's overrides.
	SessionLimits limit.Set `json:"session_limits"`
	RunLimits     limit.Set `json:"run_limits"`
	MaxLimits     limit.Set `json:"max_limits"`
	// RunsMemoryReserve (bytes) is what all runs together leave to the control plane.
	RunsMemoryReserve int64 `json:"runs_memory_reserve"`
	// The store's space limits (bytes; Btrfs simple quotas, on when any is set): every session's
	// and agent's quota, the bound of session.create's quota, and what all agents together leave
	// free for the daemon's state: --session-quota, --agent-quota, --max-session-quota,
	// --store-reserve.
	SessionQuota    int64 `json:"session_quota"`
	AgentQuota      int64 `json:"agent_quota"`
	MaxSessionQuota int64 `json:"max_session_quota"`
	StoreReserve    int64 `json:"store_reserve"`
	// ShareTools enables the session-share plugin's actions on the sessions' sockets (allox share,
	// python3 /run/allox/share.py): --share-tools. It needs the session-share plugin.
	ShareTools bool `json:"share_tools"`
	// Dialog enables the dialog plugin (the Probe's dialog channel: runs ask on their session's
	// socket, the host listener answers): --dialog. It needs the dialog plugin.
	Dialog bool `json:"dialog"`
	// SessionNetwork configures the session-network plugin (nil: the daemon's defaults, the
	// plugin off).
	SessionNetwork *SessionNetwork `json:"session_network,omitempty"`
}

// quotaAttrs are the sandbox block's quota attributes with their daemon flags, in render order.
func (s *Sandbox) quotaAttrs() []struct {
	attr, flag string
	v          *int64
} {
	return []struct {
		attr, flag string
		v          *int64
	}{{"session_quota", "session-quota", &s.SessionQuota}, {"agent_quota", "agent-quota", &s.AgentQuota},
		{"max_session_quota", "max-session-quota", &s.MaxSessionQuota}, {"store_reserve", "store-reserve", &s.StoreReserve}}
}

// DaemonPackage is the build package of the workspace daemon, the only service a sandbox block
// configures.
const DaemonPackage = "./services/workspace-daemon"

var sandboxSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{{Name: "managed_execution"}, {Name: "share_tools"}, {Name: "dialog"}, {Name: "runs_memory_reserve"},
		{Name: "session_quota"}, {Name: "agent_quota"}, {Name: "max_session_quota"}, {Name: "store_reserve"}},
	Blocks: []hcl.BlockHeaderSchema{{Type: "session_limits"}, {Type: "run_limits"}, {Type: "max_limits"}, {Type: "session_network"}},
}

var limitsSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{{Name: limit.PidsMax}, {Name: limit.MemoryMax}, {Name: limit.MemorySwapMax}, {Name: limit.CPUWeight}},
}

// decodeSandbox decodes the sandbox block at key ("service.0.sandbox").
func (d *decoder) decodeSandbox(key string, b *hcl.Block) *Sandbox {
	s := &Sandbox{}
	c := d.content(key, b.Body, sandboxSchema)
	attr(d, c, key, "managed_execution", &s.ManagedExecution)
	attr(d, c, key, "share_tools", &s.ShareTools)
	attr(d, c, key, "dialog", &s.Dialog)
	var reserve string
	if attr(d, c, key, "runs_memory_reserve", &reserve) {
		s.RunsMemoryReserve = d.size(key+".runs_memory_reserve", reserve)
	}
	for _, q := range s.quotaAttrs() {
		var v string
		if attr(d, c, key, q.attr, &v) {
			*q.v = d.size(key+"."+q.attr, v)
		}
	}
	for _, l := range []struct {
		typ string
		dst *limit.Set
	}{{"session_limits", &s.SessionLimits}, {"run_limits", &s.RunLimits}, {"max_limits", &s.MaxLimits}} {
		if lb := d.block(c, b.Body, key+"."+l.typ, l.typ, false); lb != nil {
			*l.dst = d.decodeLimits(key+"."+l.typ, lb)
		}
	}
	if nb := d.block(c, b.Body, key+".session_network", "session_network", false); nb != nil {
		s.SessionNetwork = d.decodeSessionNetwork(key+".session_network", nb)
	}
	return s
}

func (d *decoder) decodeLimits(key string, b *hcl.Block) limit.Set {
	var s limit.Set
	c := d.content(key, b.Body, limitsSchema)
	attr(d, c, key, limit.PidsMax, &s.PidsMax)
	attr(d, c, key, limit.CPUWeight, &s.CPUWeight)
	var mem, swap string
	if attr(d, c, key, limit.MemoryMax, &mem) {
		s.MemoryMax = d.size(key+"."+limit.MemoryMax, mem)
	}
	if attr(d, c, key, limit.MemorySwapMax, &swap) {
		s.MemorySwapMax = limit.Int64(d.size(key+"."+limit.MemorySwapMax, swap))
	}
	return s
}

// size parses a size attribute, reporting a malformed one at key (and marking it failed).
func (d *decoder) size(key, v string) int64 {
	n, err := limit.ParseSize(v)
	if err != nil {
		d.errorf(key, "Invalid size", "%s; got %q.", err, v)
		d.failed[key] = true
	}
	return n
}
