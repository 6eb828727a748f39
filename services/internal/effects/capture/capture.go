// Package capture takes the canonical snapshots of an evidence set: one
// function per domain, each returning a sorted, JSON-able
// evidence.Snapshot or an explicit "unconfirmable: reason". Capture never
// fails as a whole: a domain that cannot be read is recorded as
// unconfirmable and the verdict turns INCONCLUSIVE, never CONSISTENT.
//
// What each domain records, and what it leaves out on purpose:
//   - workspace, shared, paths: every entry's type, permission bits
//     (including setuid/setgid/sticky), uid, gid, size, sha256 of the
//     content and symlink target, keyed by path. Times, inode numbers,
//     link counts and extended attributes are not recorded.
//   - sysctl: every readable key under /proc/sys matched by the scope, with
//     its value (or the errno a read returns, which is stable too), minus
//     VolatileSysctls (keys the kernel changes by itself) and fs.binfmt_misc
//     (walking it triggers its automount). Write-only keys are skipped.
//   - bpf: programs (type, name, tag), maps (type, name, key/value size,
//     max entries, flags) and links (type and the identity of their
//     program), each counted: ids are reassigned and never compared.
//   - mounts: /proc/1/mountinfo as mount point, fs type, source, root,
//     mount and super options, propagation type; ids and device numbers out.
//   - network: links (type, admin up, mtu, master, hardware address),
//     addresses (temporary IPv6 privacy addresses and time-dependent flags
//     out), routes of every table, policy routing rules. Neighbours and
//     counters are dynamic and not recorded.
//   - netfilter: nftables tables, chains, rules (expressions in order,
//     counters and quotas zeroed) and sets (not their elements). Legacy
//     x_tables rules are not read.
//   - modules: /proc/modules names and states; a kernel without module
//     support (no /proc/modules, as the Allox guest kernel) is the definite
//     state "nothing can be loaded".
//   - processes: every process in the session cgroup subtree (pid, start
//     time, comm, exe, cgroup).
package capture

import (
	"github.com/allox-os/allox/services/internal/effects/evidence"
	"github.com/allox-os/allox/services/internal/effects/scope"
)

// Config names what a capture looks at.
type Config struct {
	Workspace     string       // the Session Workspace (current/)
	Shared        string       // the agent's shared/
	SessionCgroup string       // absolute path of the session's cgroup v2 directory
	Scope         *scope.Scope // nil: workspace and shared/ only
}

// All captures every domain of cfg's scope at point.
func All(cfg *Config, point string) []*evidence.Snapshot {
	hashes.newPass()
	var out []*evidence.Snapshot
	for _, d := range cfg.Scope.Domains() {
		out = append(out, Domain(cfg, d, point))
	}
	return out
}

// Domain captures one domain at point.
func Domain(cfg *Config, domain, point string) *evidence.Snapshot {
	var s *evidence.Snapshot
	switch domain {
	case scope.Workspace:
		s = Tree(cfg.Workspace)
	case scope.Shared:
		s = Tree(cfg.Shared)
	case scope.Paths:
		s = Paths(cfg.Scope.Paths)
	case scope.Sysctl:
		s = Sysctls("/proc/sys", cfg.Scope.Sysctl)
	case scope.BPF:
		s = BPF()
	case scope.Mounts:
		s = Mounts("/proc/1/mountinfo")
	case scope.Network:
		s = Network()
	case scope.Netfilter:
		s = Netfilter()
	case scope.Modules:
		s = Modules("/proc/modules")
	case scope.Processes:
		s = Processes(cfg.SessionCgroup)
	default:
		s = evidence.Unconfirmed(domain, point, "BUG: no capture for domain "+domain)
	}
	s.Domain, s.Point = domain, point
	if err := s.Canonicalize(); err != nil {
		s = evidence.Unconfirmed(domain, point, err.Error())
	}
	return s
}

func unconfirmed(reason string) *evidence.Snapshot { return evidence.Unconfirmed("", "", reason) }
