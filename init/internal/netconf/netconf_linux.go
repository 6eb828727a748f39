// Package netconf configures network interfaces over rtnetlink (bring a link up, add an address,
// add a default route) with nothing but golang.org/x/sys/unix, so the static init carries no
// netlink library.
package netconf

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"

	"golang.org/x/sys/unix"
)

// ErrNoLink is returned when the named interface does not exist.
var ErrNoLink = errors.New("no such network interface")

func index(name string) (int32, error) {
	ifc, err := net.InterfaceByName(name)
	if err != nil {
		return 0, fmt.Errorf("%w: %s (%v)", ErrNoLink, name, err)
	}
	return int32(ifc.Index), nil
}

// LinkUp sets the interface administratively up (ip link set NAME up).
func LinkUp(name string) error {
	idx, err := index(name)
	if err != nil {
		return err
	}
	msg := unix.IfInfomsg{Family: unix.AF_UNSPEC, Index: idx, Flags: unix.IFF_UP, Change: unix.IFF_UP}
	return request(unix.RTM_NEWLINK, 0, msg)
}

// AddrAdd adds addr to the interface (ip addr add ADDR/LEN dev NAME); an existing address is fine.
func AddrAdd(name string, addr netip.Prefix) error {
	idx, err := index(name)
	if err != nil {
		return err
	}
	msg := unix.IfAddrmsg{
		Family:    family(addr.Addr()),
		Prefixlen: uint8(addr.Bits()),
		Scope:     unix.RT_SCOPE_UNIVERSE,
		Index:     uint32(idx),
	}
	ip := addr.Addr().AsSlice()
	err = request(unix.RTM_NEWADDR, unix.NLM_F_CREATE|unix.NLM_F_EXCL, msg,
		attr{unix.IFA_LOCAL, ip}, attr{unix.IFA_ADDRESS, ip})
	if errors.Is(err, unix.EEXIST) {
		return nil
	}
	return err
}

// DefaultRoute adds a default route through gateway on the interface (ip route add default via
// GATEWAY dev NAME); an existing default route is left alone.
func DefaultRoute(name string, gateway netip.Addr) error {
	idx, err := index(name)
	if err != nil {
		return err
	}
	msg := unix.RtMsg{
		Family:   family(gateway),
		Table:    unix.RT_TABLE_MAIN,
		Protocol: unix.RTPROT_BOOT,
		Scope:    unix.RT_SCOPE_UNIVERSE,
		Type:     unix.RTN_UNICAST,
	}
	oif := make([]byte, 4)
	nativeEndian.PutUint32(oif, uint32(idx))
	err = request(unix.RTM_NEWROUTE, unix.NLM_F_CREATE|unix.NLM_F_EXCL, msg,
		attr{unix.RTA_GATEWAY, gateway.AsSlice()}, attr{unix.RTA_OIF, oif})
	if errors.Is(err, unix.EEXIST) {
		return nil
	}
	return err
}

func family(a netip.Addr) uint8 {
	if a.Is4() {
		return unix.AF_INET
	}
	return unix.AF_INET6
}

// NoDAD turns IPv6 duplicate address detection off on the interface before it comes up
// (net.ipv6.conf.NAME.accept_dad = 0). A guest's NIC has one peer, the VMM, so DAD finds
// nothing; while it runs (about a second after link up) the link-local address is tentative and
// its local route appears only when it ends, so the guest's network configuration would still be
// changing under the first runs after ready. Without IPv6 (no such file) there is nothing to do.
func NoDAD(name string) error {
	err := os.WriteFile("/proc/sys/net/ipv6/conf/"+name+"/accept_dad", []byte("0\n"), 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("net.ipv6.conf.%s.accept_dad: %w", name, err)
	}
	return nil
}
