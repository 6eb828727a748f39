// Package netguard keeps every process of a cgroup subtree away from a set of
// protected ports: the daemon's listeners and the guest's other trusted
// services, which sandboxed runs could otherwise reach because they share the
// guest's network namespace.
//
// [Attach] loads six cgroup sock_addr eBPF programs (connect4, connect6,
// sendmsg4, sendmsg6, bind4, bind6) and attaches them to one cgroup
// directory, the runs' parent group; every descendant group, including the
// ones created later, inherits them. A connect(2) (TCP, also sendto with
// MSG_FASTOPEN; connected UDP), an unconnected UDP sendto(2) or a bind(2)
// whose port is protected fails with EPERM, whatever the address: every
// loopback address, IPv4-mapped IPv6, the unspecified address, the machine's
// own addresses, any host name.
//
// The attachment is a legacy BPF_PROG_ATTACH without flags, not a bpf_link:
// it stays in force after the attaching process closes its descriptors or
// exits, so runs stay guarded while the daemon restarts, and a later Attach
// to the same directory replaces it instead of stacking a second copy.
// Without flags, no descendant group can attach programs of these six types.
//
// The guard sees the port a process asks for. Ports the kernel picks itself
// (bind to port 0, listen or connect on an unbound socket) never reach it, so
// a protected port must lie outside net.ipv4.ip_local_port_range or be listed
// in net.ipv4.ip_local_reserved_ports; otherwise a run can squat it by
// asking for ephemeral ports until it is handed the protected one.
//
// The guard also relies on the runs holding no capability that undoes it:
// moving out of the cgroup (write access to cgroupfs), detaching programs
// (CAP_NET_ADMIN, CAP_BPF, CAP_SYS_ADMIN) or forging packets (CAP_NET_RAW).
// A socket created outside the subtree and passed into a run is not guarded:
// the kernel judges a socket by the cgroup it was created in.
package netguard

import (
	"errors"
	"fmt"
	"slices"
)

// ErrNoCgroupBPF means the kernel cannot run cgroup sock_addr programs.
var ErrNoCgroupBPF = errors.New("kernel lacks cgroup sock_addr BPF programs: it needs CONFIG_BPF_SYSCALL=y and CONFIG_CGROUP_BPF=y")

// portWords is the number of 64-bit words of the protected-port bitmap, one
// bit per port (the map protected_ports in bpf/netguard.bpf.c).
const portWords = 65536 / 64

// portSet validates ports and returns them sorted, without duplicates.
func portSet(ports []uint16) ([]uint16, error) {
	if len(ports) == 0 {
		return nil, errors.New("no ports to protect: give at least one, e.g. the daemon's listener port")
	}
	set := slices.Clone(ports)
	slices.Sort(set)
	set = slices.Compact(set)
	if set[0] == 0 {
		return nil, fmt.Errorf("port 0 cannot be protected: it would refuse every bind to an ephemeral port")
	}
	return set, nil
}

// bitmap returns the protected-port bitmap: bit p%64 of word p/64 is set
// for every port p of ports.
func bitmap(ports []uint16) [portWords]uint64 {
	var words [portWords]uint64
	for _, p := range ports {
		words[p/64] |= 1 << (p % 64)
	}
	return words
}
