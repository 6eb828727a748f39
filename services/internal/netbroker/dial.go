package netbroker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// target is a destination the policy allowed: the addresses to dial, in the resolver's order,
// and the decision on the first of them.
type target struct {
	host  string
	port  uint16
	addrs []netip.Addr
	dec   Decision
}

// resolve resolves host (unless it is an address) and keeps the addresses the policy allows for
// the session. When it allows none, the error is a *DeniedError naming the rule that denied the
// first address.
func (b *Broker) resolve(ctx context.Context, agent, session, host string, port uint16) (target, error) {
	t := target{host: host, port: port}
	if port == 0 {
		return t, fmt.Errorf("port 0: name a port from 1 to 65535")
	}
	pol := b.policy.Load() // one policy for the whole decision, whatever a reload does meanwhile
	name := strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(name); err == nil {
		if a.Zone() != "" {
			return t, fmt.Errorf("host %q has a zone: name the address without %%%s", host, a.Zone())
		}
		addrs = []netip.Addr{a}
	} else {
		if !validName(name) {
			return t, fmt.Errorf("host %q is not a host name or address", host)
		}
		if d, sure := pol.DecideName(agent, session, name, port); sure {
			t.dec = d
			return t, &DeniedError{Host: host, Port: port, Rule: d.Rule}
		}
		ctx, cancel := context.WithTimeout(ctx, b.limits.ConnectTimeout)
		defer cancel()
		addrs, err = b.cfg.Resolver.LookupNetIP(ctx, "ip", name)
		if err != nil {
			return t, fmt.Errorf("resolve %s: %w", name, err)
		}
		if len(addrs) == 0 {
			return t, fmt.Errorf("resolve %s: no address", name)
		}
	}
	var denied *Decision
	for _, a := range addrs {
		d := pol.Decide(agent, session, name, a, port, b.cfg.Own)
		if !d.Allow {
			if denied == nil {
				denied = &d
			}
			continue
		}
		if len(t.addrs) == 0 {
			t.dec = d
		}
		t.addrs = append(t.addrs, a.Unmap())
	}
	if len(t.addrs) == 0 {
		t.dec = *denied
		return t, &DeniedError{Host: host, Port: port, Rule: denied.Rule}
	}
	return t, nil
}

func validName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for _, c := range s {
		if !(c == '.' || c == '-' || c == '_' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z') {
			return false
		}
	}
	return true
}

// dial connects to the first of t's addresses that answers within the connect timeout, by
// address: the name is never resolved again.
func (b *Broker) dial(ctx context.Context, t target) (net.Conn, netip.Addr, error) {
	ctx, cancel := context.WithTimeout(ctx, b.limits.ConnectTimeout)
	defer cancel()
	var errs []error
	for _, a := range t.addrs {
		c, err := b.cfg.Dialer.DialContext(ctx, "tcp", netip.AddrPortFrom(a, t.port).String())
		if err == nil {
			return c, a, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, netip.Addr{}, fmt.Errorf("connect %s port %d: %w", t.host, t.port, errors.Join(errs...))
}
