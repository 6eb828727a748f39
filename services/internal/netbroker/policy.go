package netbroker

import (
	"bufio"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"
)

// Policy is a parsed policy file. The zero value has no rules and allows by default.
type Policy struct {
	global       []rule
	agents       map[string]*[]rule
	sessions     map[string]*[]rule // key agent + "/" + session
	defaultDeny  bool
	defaultWhere string // where "default deny|allow" was set, or ""
}

type rule struct {
	allow  bool
	host   string // "", "*", "*.suffix" or an exact name
	prefix netip.Prefix
	ports  []portRange // empty: every port
	where  string      // file:line
}

type portRange struct{ lo, hi uint16 }

// Decision is the policy's verdict on one address.
type Decision struct {
	Allow bool
	Rule  string // "policy.conf:12" or "default: link-local"
}

// ParsePolicy reads a policy in the format of the package doc; name is the file name used in
// errors and in the rules' positions.
func ParsePolicy(name string, r io.Reader) (*Policy, error) {
	p := &Policy{agents: map[string]*[]rule{}, sessions: map[string]*[]rule{}}
	target := &p.global
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 4096), 64<<10)
	for n := 1; sc.Scan(); n++ {
		where := name + ":" + strconv.Itoa(n)
		line, _, _ := strings.Cut(sc.Text(), "#")
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		var err error
		switch {
		case strings.HasPrefix(f[0], "["):
			target, err = p.section(strings.Join(f, " "))
		case f[0] == "default":
			err = p.setDefault(f, target == &p.global, where)
		default:
			var ru rule
			ru, err = parseRule(f, where)
			*target = append(*target, ru)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return p, nil
}

func (p *Policy) section(h string) (*[]rule, error) {
	if !strings.HasSuffix(h, "]") {
		return nil, fmt.Errorf("section header %q has no closing ']': write [global], [agent AGENT] or [session AGENT/SESSION]", h)
	}
	f := strings.Fields(strings.TrimSuffix(strings.TrimPrefix(h, "["), "]"))
	switch {
	case len(f) == 1 && f[0] == "global":
		return &p.global, nil
	case len(f) == 2 && f[0] == "agent" && !strings.Contains(f[1], "/"):
		return slotOf(p.agents, f[1]), nil
	case len(f) == 2 && f[0] == "session" && strings.Count(f[1], "/") == 1 && !strings.HasPrefix(f[1], "/") && !strings.HasSuffix(f[1], "/"):
		return slotOf(p.sessions, f[1]), nil
	}
	return nil, fmt.Errorf("unknown section %s: write [global], [agent AGENT] or [session AGENT/SESSION]", h)
}

// slotOf returns the rules of section k, creating it; a section may be reopened further down.
func slotOf(m map[string]*[]rule, k string) *[]rule {
	if m[k] == nil {
		m[k] = new([]rule)
	}
	return m[k]
}

func (p *Policy) setDefault(f []string, global bool, where string) error {
	if !global {
		return fmt.Errorf("\"default\" is only allowed in the global part: move it above the first [agent] or [session] section")
	}
	if len(f) != 2 || (f[1] != "allow" && f[1] != "deny") {
		return fmt.Errorf("write \"default allow\" or \"default deny\"")
	}
	if p.defaultWhere != "" {
		return fmt.Errorf("the default is already set at %s: keep one \"default\" line", p.defaultWhere)
	}
	p.defaultDeny, p.defaultWhere = f[1] == "deny", where
	return nil
}

const ruleHelp = "write allow|deny host PATTERN [port PORTS] or allow|deny cidr PREFIX [port PORTS]"

func parseRule(f []string, where string) (rule, error) {
	ru := rule{where: where}
	switch f[0] {
	case "allow":
		ru.allow = true
	case "deny":
	default:
		return ru, fmt.Errorf("unknown action %q: %s", f[0], ruleHelp)
	}
	if len(f) != 3 && len(f) != 5 {
		return ru, fmt.Errorf("%d words: %s", len(f), ruleHelp)
	}
	var err error
	switch f[1] {
	case "host":
		ru.host, err = parsePattern(f[2])
	case "cidr":
		ru.prefix, err = parsePrefix(f[2])
	default:
		err = fmt.Errorf("unknown match %q: %s", f[1], ruleHelp)
	}
	if err != nil {
		return ru, err
	}
	if len(f) == 5 {
		if f[3] != "port" {
			return ru, fmt.Errorf("expected \"port\" after %s %s, got %q: %s", f[1], f[2], f[3], ruleHelp)
		}
		ru.ports, err = parsePorts(f[4])
	}
	return ru, err
}

func parsePattern(s string) (string, error) {
	s = strings.ToLower(s)
	if s == "*" {
		return s, nil
	}
	name := strings.TrimSuffix(strings.TrimPrefix(s, "*."), ".")
	if _, err := netip.ParseAddr(name); err == nil {
		return "", fmt.Errorf("host %q is an address: use \"cidr %s\"", s, name)
	}
	if _, err := netip.ParsePrefix(name); err == nil {
		return "", fmt.Errorf("host %q is a prefix: use \"cidr %s\"", s, name)
	}
	for _, label := range strings.Split(name, ".") {
		if label == "" || len(label) > 63 || strings.Trim(label, "abcdefghijklmnopqrstuvwxyz0123456789-_") != "" {
			return "", fmt.Errorf("host %q is not a host name: use a name like example.com, *.example.com or *", s)
		}
	}
	return strings.TrimSuffix(s, "."), nil
}

func parsePrefix(s string) (netip.Prefix, error) {
	if a, err := netip.ParseAddr(s); err == nil {
		a = a.Unmap()
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return p, fmt.Errorf("cidr %q is not an address or prefix: write e.g. 10.0.0.0/8, fd00::/8 or 10.0.2.2", s)
	}
	if p != p.Masked() {
		return p, fmt.Errorf("cidr %q has host bits set: write %s", s, p.Masked())
	}
	if p.Addr().Is4In6() {
		return p, fmt.Errorf("cidr %q is IPv4-mapped: write the IPv4 prefix", s)
	}
	return p, nil
}

func parsePorts(s string) ([]portRange, error) {
	var out []portRange
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, errA := parsePort(lo)
		b, errB := a, error(nil)
		if isRange {
			b, errB = parsePort(hi)
		}
		if errA != nil || errB != nil || b < a {
			return nil, fmt.Errorf("port %q: write ports 1-65535 as 443, 8080-8090 or 22,80,443", s)
		}
		out = append(out, portRange{a, b})
	}
	return out, nil
}

func parsePort(s string) (uint16, error) {
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("bad port %q", s)
	}
	return uint16(n), nil
}
