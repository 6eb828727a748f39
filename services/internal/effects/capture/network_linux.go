package capture

import (
	"errors"
	"fmt"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/allox-os/allox/services/internal/effects/evidence"
)

// addrTimeFlags change with time (duplicate address detection, lifetimes)
// and are masked out of an address's flags.
const addrTimeFlags = unix.IFA_F_TENTATIVE | unix.IFA_F_OPTIMISTIC | unix.IFA_F_DEPRECATED | unix.IFA_F_DADFAILED

// Network captures the network configuration of the observer's network
// namespace: links, addresses, routes of every table and policy routing
// rules. Everything is keyed by link name, never by index.
func Network() *evidence.Snapshot {
	links, err := netlink.LinkList()
	if err != nil {
		return unconfirmed("links: " + err.Error())
	}
	names := map[int]string{}
	for _, l := range links {
		names[l.Attrs().Index] = l.Attrs().Name
	}
	name := func(i int) string {
		if n, ok := names[i]; ok {
			return n
		}
		if i == 0 {
			return "-"
		}
		return fmt.Sprintf("index-%d", i)
	}
	counts := map[string]int{}
	s := &evidence.Snapshot{Excluded: []string{"neighbours", "link counters and carrier state", "temporary IPv6 addresses", "address lifetimes"}}
	for _, l := range links {
		a := l.Attrs()
		s.Items = append(s.Items, evidence.Item{Key: "link " + a.Name, Value: fmt.Sprintf(
			"type=%s up=%t mtu=%d master=%s hw=%s", l.Type(), a.Flags&unix.IFF_UP != 0, a.MTU, name(a.MasterIndex), a.HardwareAddr)})
	}
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return unconfirmed("addresses: " + err.Error())
	}
	for _, a := range addrs {
		if a.Flags&unix.IFA_F_TEMPORARY != 0 {
			continue
		}
		counts[fmt.Sprintf("addr %s %s scope=%d flags=%#x", name(a.LinkIndex), a.IPNet, a.Scope, a.Flags&^addrTimeFlags)]++
	}
	routes, err := netlink.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return unconfirmed("routes: " + err.Error())
	}
	for _, r := range routes {
		counts[fmt.Sprintf("route table=%d family=%d dst=%s gw=%s dev=%s src=%s proto=%d scope=%d type=%d metric=%d multipath=%v",
			r.Table, r.Family, r.Dst, r.Gw, name(r.LinkIndex), r.Src, r.Protocol, r.Scope, r.Type, r.Priority, r.MultiPath)]++
	}
	rules, err := netlink.RuleList(netlink.FAMILY_ALL)
	switch {
	case errors.Is(err, unix.EOPNOTSUPP):
		// A kernel without policy routing (CONFIG_FIB_RULES off, as in the Allox guest) has no
		// RTM_GETRULE handler: there are no rules, and none can be added. That is definite.
		s.Note = "no policy routing in this kernel: no routing rules can exist"
	case err != nil:
		return unconfirmed("rules: " + err.Error())
	}
	for _, r := range rules {
		counts[fmt.Sprintf("rule family=%d prio=%d %s", r.Family, r.Priority, r)]++
	}
	for k, n := range counts {
		s.Items = append(s.Items, evidence.Item{Key: k, Value: fmt.Sprintf("count=%d", n)})
	}
	return s
}
