package netbroker

import (
	"net/netip"
	"strings"
)

// protected is the built-in protection list, in the order it is checked; "own" (the guest's
// addresses) is checked after loopback.
var protected = []struct {
	name     string
	prefixes []netip.Prefix
}{
	{"link-local", prefixes("169.254.0.0/16", "fe80::/10")},
	{"loopback", prefixes("127.0.0.0/8", "::1/128")},
	{"unspecified", prefixes("0.0.0.0/8", "::/128")},
	{"private", prefixes("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "fc00::/7")},
}

func prefixes(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParsePrefix(s)
	}
	return out
}

// protection names the built-in range ip falls in ("link-local", "own", ...), or "".
func protection(ip netip.Addr, own []netip.Prefix) string {
	for i, p := range protected {
		if i == 2 { // own addresses before unspecified and private: the more telling name
			if in(ip, own) {
				return "own"
			}
		}
		if in(ip, p.prefixes) {
			return p.name
		}
	}
	return ""
}

func in(ip netip.Addr, ps []netip.Prefix) bool {
	for _, p := range ps {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// Decide is the policy's verdict on dialling ip:port for name (the host the client asked for; an
// IP literal or "" when it asked for an address) on behalf of agent's session; own is the guest's
// own addresses.
func (p *Policy) Decide(agent, session, name string, ip netip.Addr, port uint16, own []netip.Prefix) Decision {
	ip = ip.Unmap()
	name = strings.TrimSuffix(strings.ToLower(name), ".")
	if _, err := netip.ParseAddr(name); err == nil {
		name = ""
	}
	prot := protection(ip, own)
	for _, rs := range p.chain(agent, session) {
		for _, ru := range rs {
			if ru.matches(name, ip, port, prot) {
				return Decision{Allow: ru.allow, Rule: ru.where}
			}
		}
	}
	if prot != "" {
		return Decision{Rule: "default: " + prot}
	}
	if p.defaultDeny {
		return Decision{Rule: p.defaultWhere}
	}
	if p.defaultWhere != "" {
		return Decision{Allow: true, Rule: p.defaultWhere}
	}
	return Decision{Allow: true, Rule: "default: allow"}
}

// DecideName is the verdict on name:port that holds whatever name resolves to, when there is
// one: a deny host rule no allow cidr rule comes before, or "default deny" with nothing that
// could allow. The broker asks it first, so a denied name is never sent to the resolver (DNS
// is a way out, too).
func (p *Policy) DecideName(agent, session, name string, port uint16) (Decision, bool) {
	name = strings.TrimSuffix(strings.ToLower(name), ".")
	for _, rs := range p.chain(agent, session) {
		for _, ru := range rs {
			if len(ru.ports) > 0 && !portIn(port, ru.ports) {
				continue
			}
			switch {
			case ru.host == "" && ru.allow:
				return Decision{}, false // some address may be allowed
			case ru.host == "" || !ru.matchesName(name):
			case ru.allow:
				return Decision{}, false
			default:
				return Decision{Rule: ru.where}, true
			}
		}
	}
	if p.defaultDeny {
		return Decision{Rule: p.defaultWhere}, true
	}
	return Decision{}, false
}

// chain is the rules consulted for a session: its own, its agent's, then the global ones.
func (p *Policy) chain(agent, session string) [][]rule {
	var out [][]rule
	if rs := p.sessions[agent+"/"+session]; rs != nil {
		out = append(out, *rs)
	}
	if rs := p.agents[agent]; rs != nil {
		out = append(out, *rs)
	}
	return append(out, p.global)
}

func (ru rule) matches(name string, ip netip.Addr, port uint16, prot string) bool {
	if len(ru.ports) > 0 && !portIn(port, ru.ports) {
		return false
	}
	if ru.host == "" {
		return ru.prefix.Contains(ip)
	}
	if ru.allow && prot != "" { // an allowed name never opens a protected address
		return false
	}
	return ru.matchesName(name)
}

func (ru rule) matchesName(name string) bool {
	if name == "" {
		return false
	}
	switch {
	case ru.host == "*":
		return true
	case strings.HasPrefix(ru.host, "*."):
		return strings.HasSuffix(name, ru.host[1:])
	}
	return name == ru.host
}

func portIn(port uint16, rs []portRange) bool {
	for _, r := range rs {
		if r.lo <= port && port <= r.hi {
			return true
		}
	}
	return false
}
