package rpc

import (
	"time"

	"github.com/allox-os/allox/internal/limit"
)

// Built-in actions of the daemon.
const (
	// ActionSystemInfo takes no params and returns SystemInfo.
	ActionSystemInfo = "system.info"
	// ActionSystemKernelConfig takes no params and returns KernelConfig.
	ActionSystemKernelConfig = "system.kernel_config"
	// ActionSystemPowerOff takes no params, replies {} and then powers the guest off. It is accepted
	// only on the authenticated host listener.
	ActionSystemPowerOff = "system.poweroff"
)

// SystemInfo is the result of system.info.
type SystemInfo struct {
	Daemon DaemonInfo `json:"daemon"`
	// Image is absent when the guest has no image manifest.
	Image  *ImageInfo `json:"image,omitempty"`
	Kernel KernelInfo `json:"kernel"`
	Store  StoreInfo  `json:"store"`
	Cgroup CgroupInfo `json:"cgroup"`
	// BootID is /proc/sys/kernel/random/boot_id: it changes on every boot.
	BootID string `json:"boot_id"`
	// Tasks is the number of tasks (threads) in the guest, from /proc/loadavg.
	Tasks int `json:"tasks"`
	// Limits says which resource limits are in force; absent with --system-only.
	Limits  *LimitsInfo `json:"limits,omitempty"`
	Sandbox SandboxInfo `json:"sandbox"`
	// Quarantined lists the sessions the store quarantined (empty when none, or with
	// --system-only); delete one with session.delete to recover it.
	Quarantined []QuarantinedSession `json:"quarantined"`
	// Plugins lists every plugin the daemon knows, in load order: whether it is installed (linked
	// into this image) and enabled (by its flag), its Plugin API version and its own version.
	Plugins []PluginInfo `json:"plugins"`
}

// PluginInfo is one plugin in system.info.
type PluginInfo struct {
	Name       string `json:"name"`
	Installed  bool   `json:"installed"`
	Enabled    bool   `json:"enabled"`
	Flag       string `json:"flag"`
	APIVersion int    `json:"api_version,omitempty"`
	Version    string `json:"version,omitempty"`
}

// QuarantinedSession is one quarantined session in system.info.
type QuarantinedSession struct {
	AgentID   string    `json:"agent_id"`
	SessionID string    `json:"session_id"`
	Reason    string    `json:"reason"`
	Since     time.Time `json:"since"`
}

// SeccompRule is one row of the runs' seccomp filter.
type SeccompRule struct {
	Syscall string `json:"syscall"`
	Number  int    `json:"nr"`   // on x86_64
	When    string `json:"when"` // "always", or the condition on the arguments, e.g. "arg0&0xffffffff == 0x28 (AF_VSOCK)"
	// Args is When for programs: every condition must hold (none: every call is refused).
	Args  []SeccompArg `json:"args"`
	Errno string       `json:"errno"`
}

// SeccompArg is one condition of a seccomp rule on argument Index: Op "eq32" (its low 32 bits
// equal Value), "any_bit" (it has a bit of Value set) or "ne" (it differs from Value).
type SeccompArg struct {
	Index int    `json:"index"`
	Op    string `json:"op"`
	Value uint64 `json:"value"`
}

// SandboxInfo is the boundary of sandboxed runs.
type SandboxInfo struct {
	// RunUID and RunGID are the runs' unprivileged identity (0 with --system-only: no runs).
	RunUID uint32 `json:"run_uid"`
	RunGID uint32 `json:"run_gid"`
	// Seccomp lists what the runs' seccomp filter refuses, row by row.
	Seccomp []SeccompRule `json:"seccomp"`
	// GuardedPorts are the ports no run may connect to, send to or bind, on any address.
	GuardedPorts []uint16 `json:"guarded_ports"`
	// ManagedExecution is true when process.start may run "managed": true — no sandbox, the
	// daemon's root privileges, the VM the only boundary (the seed's migration path).
	ManagedExecution bool `json:"managed_execution"`
}

// DaemonInfo describes the running daemon and what protects it from the runs.
type DaemonInfo struct {
	Version string `json:"version"`
	Pid     int    `json:"pid"`
	// Cgroup is the daemon's own cgroup (from /proc/self/cgroup), e.g. "/system/workspace-daemon";
	// MemoryMin and MemoryLow are that group's memory.min and memory.low ("" without them).
	Cgroup      string `json:"cgroup"`
	MemoryMin   string `json:"memory_min,omitempty"`
	MemoryLow   string `json:"memory_low,omitempty"`
	OOMScoreAdj int    `json:"oom_score_adj"`
}

// LimitsInfo says which session and run limits the daemon applies and which it cannot.
type LimitsInfo struct {
	// Controllers are the cgroup controllers delegated to the runs (of cpu, memory, pids).
	Controllers []string `json:"controllers"`
	// Enforced are the limits that really apply (of pids_max, memory_max, memory_swap_max,
	// cpu_weight); Skipped those whose controller or file is missing. Never null.
	Enforced []string `json:"enforced"`
	Skipped  []string `json:"skipped"`
	// SessionDefaults, RunDefaults and Max are the daemon's --session-limits, --run-limits and
	// --max-limits.
	SessionDefaults limit.Set `json:"session_defaults"`
	RunDefaults     limit.Set `json:"run_defaults"`
	Max             limit.Set `json:"max"`
	// RunsMemoryMax is the runs' parent group's memory.max: all runs together ("max" when
	// unbounded, "" without the memory controller).
	RunsMemoryMax string `json:"runs_memory_max,omitempty"`
	// RunOOMScoreAdj is every run's oom_score_adj, also its floor.
	RunOOMScoreAdj int `json:"run_oom_score_adj"`
}

// ImageInfo names the image, from its manifest.
type ImageInfo struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

// KernelInfo is the running kernel, from uname(2).
type KernelInfo struct {
	Release string `json:"release"`
	Version string `json:"version"`
	Machine string `json:"machine"`
}

// StoreInfo describes the workspace store (the daemon's --root).
type StoreInfo struct {
	Root string `json:"root"`
	// FSType is the filesystem name ("btrfs", "tmpfs", "ext4", ...) or its statfs magic in hex.
	FSType string `json:"fstype"`
	// Quota is the store-wide qgroup holding every agent (3/1): its limit (what the store can hold
	// minus Reserve), what the agents use and the reserve they leave free for the daemon's state;
	// absent with quotas off.
	Quota *Quota `json:"quota,omitempty"`
}

// CgroupInfo describes the cgroup hierarchy at /sys/fs/cgroup.
type CgroupInfo struct {
	// Version is 2 when /sys/fs/cgroup is cgroup2, else 0.
	Version int `json:"version"`
	// Controllers and SubtreeControl are the root cgroup's cgroup.controllers and
	// cgroup.subtree_control; empty (never null) when there are none.
	Controllers    []string `json:"controllers"`
	SubtreeControl []string `json:"subtree_control"`
}

// KernelConfig is the result of system.kernel_config.
type KernelConfig struct {
	// Config is the running kernel's .config text, from /proc/config.gz.
	Config string `json:"config"`
}
