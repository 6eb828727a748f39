package capture

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"

	"github.com/allox-os/allox/services/internal/effects/evidence"
)

// Netfilter captures the nftables ruleset of the observer's network
// namespace: tables, chains, rules (by position in their chain, the
// expressions rendered as JSON with counters and quotas zeroed) and sets
// (without elements, which dynamic sets change by themselves).
func Netfilter() *evidence.Snapshot {
	c, err := nftables.New()
	if err != nil {
		return unconfirmed("nftables: " + err.Error())
	}
	s := &evidence.Snapshot{Excluded: []string{"rule counters and quotas", "set elements", "legacy x_tables"}}
	add := func(k, v string) { s.Items = append(s.Items, evidence.Item{Key: k, Value: v}) }
	tables, err := c.ListTables()
	if err != nil {
		return unconfirmed("nftables tables: " + err.Error())
	}
	for _, t := range tables {
		tk := fmt.Sprintf("%s %s", family(t.Family), t.Name)
		add("table "+tk, fmt.Sprintf("flags=%#x", t.Flags))
		sets, err := c.GetSets(t)
		if err != nil {
			return unconfirmed("nftables sets of " + tk + ": " + err.Error())
		}
		for _, st := range sets {
			add(fmt.Sprintf("set %s %s", tk, st.Name), fmt.Sprintf("key=%s data=%s constant=%t interval=%t map=%t timeout=%s",
				st.KeyType.Name, st.DataType.Name, st.Constant, st.Interval, st.IsMap, st.Timeout))
		}
	}
	chains, err := c.ListChains()
	if err != nil {
		return unconfirmed("nftables chains: " + err.Error())
	}
	for _, ch := range chains {
		ck := fmt.Sprintf("%s %s %s", family(ch.Table.Family), ch.Table.Name, ch.Name)
		add("chain "+ck, fmt.Sprintf("type=%s hook=%s prio=%s policy=%s", ch.Type, deref(ch.Hooknum), deref(ch.Priority), deref(ch.Policy)))
		rules, err := c.GetRules(ch.Table, ch)
		if err != nil {
			return unconfirmed("nftables rules of " + ck + ": " + err.Error())
		}
		for i, r := range rules {
			add(fmt.Sprintf("rule %s #%04d", ck, i+1), renderExprs(r.Exprs))
		}
	}
	return s
}

func deref[T any](p *T) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprint(*p)
}

func family(f nftables.TableFamily) string {
	switch f {
	case nftables.TableFamilyINet:
		return "inet"
	case nftables.TableFamilyIPv4:
		return "ip"
	case nftables.TableFamilyIPv6:
		return "ip6"
	case nftables.TableFamilyARP:
		return "arp"
	case nftables.TableFamilyNetdev:
		return "netdev"
	case nftables.TableFamilyBridge:
		return "bridge"
	}
	return fmt.Sprintf("family-%d", f)
}

// renderExprs renders a rule's expressions in order, as type and JSON,
// with the counters the kernel updates by itself zeroed.
func renderExprs(exprs []expr.Any) string {
	parts := make([]string, 0, len(exprs))
	for _, e := range exprs {
		switch x := e.(type) {
		case *expr.Counter:
			c := *x
			c.Bytes, c.Packets = 0, 0
			e = &c
		case *expr.Quota:
			q := *x
			q.Consumed = 0
			e = &q
		}
		b, err := json.Marshal(e)
		if err != nil {
			b = []byte("unrenderable")
		}
		parts = append(parts, fmt.Sprintf("%T%s", e, b))
	}
	return strings.Join(parts, " ")
}
