package netbroker

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const overridePolicy = `# global
deny host *.evil.test
allow cidr 10.0.2.2/32 port 8080-8090
allow host pkg.test port 443
deny cidr 203.0.113.0/24 port 22,25

[agent a1]
deny host web.test            # line 8
allow cidr 192.168.7.0/24     # line 9

[session a1/s2]
allow host web.test port 80   # line 12

[agent a2]
allow host *.evil.test        # line 15
`

func TestDecide(t *testing.T) {
	p, err := ParsePolicy("policy.conf", strings.NewReader(overridePolicy))
	if err != nil {
		t.Fatal(err)
	}
	own := []netip.Prefix{netip.MustParsePrefix("10.0.2.15/32")}
	for _, tc := range []struct {
		name, agent, session, host, ip string
		port                           uint16
		want                           Decision
	}{
		{"public by default", "a0", "s", "x.test", "198.51.100.7", 80, Decision{true, "default: allow"}},
		{"global host deny", "a0", "s", "a.b.evil.test", "198.51.100.7", 443, Decision{false, "policy.conf:2"}},
		{"suffix pattern excludes the apex", "a0", "s", "evil.test", "198.51.100.7", 443, Decision{true, "default: allow"}},
		{"host match ignores case and trailing dot", "a0", "s", "A.Evil.Test.", "198.51.100.7", 443, Decision{false, "policy.conf:2"}},
		{"cidr allow opens private, in range", "a0", "s", "", "10.0.2.2", 8085, Decision{true, "policy.conf:3"}},
		{"cidr allow, port outside its range", "a0", "s", "", "10.0.2.2", 8091, Decision{false, "default: private"}},
		{"host allow never opens link-local", "a0", "s", "pkg.test", "169.254.169.254", 443, Decision{false, "default: link-local"}},
		{"host allow never opens loopback", "a0", "s", "pkg.test", "127.0.0.1", 443, Decision{false, "default: loopback"}},
		{"IPv4-mapped metadata", "a0", "s", "", "::ffff:169.254.169.254", 80, Decision{false, "default: link-local"}},
		{"IPv6 link-local", "a0", "s", "", "fe80::1", 80, Decision{false, "default: link-local"}},
		{"unspecified reaches the host", "a0", "s", "", "0.0.0.0", 80, Decision{false, "default: unspecified"}},
		{"own address", "a0", "s", "", "10.0.2.15", 8085, Decision{false, "default: own"}},
		{"own address not opened by host allow", "a0", "s", "pkg.test", "10.0.2.15", 443, Decision{false, "default: own"}},
		{"CGNAT", "a0", "s", "", "100.64.1.1", 80, Decision{false, "default: private"}},
		{"ULA", "a0", "s", "", "fd00::1", 80, Decision{false, "default: private"}},
		{"IP literal is not matched by host rules", "a0", "s", "198.51.100.7", "198.51.100.7", 443, Decision{true, "default: allow"}},
		{"port list", "a0", "s", "", "203.0.113.9", 25, Decision{false, "policy.conf:5"}},
		{"port list, other port", "a0", "s", "", "203.0.113.9", 80, Decision{true, "default: allow"}},
		{"agent rule before global", "a1", "s1", "web.test", "198.51.100.7", 80, Decision{false, "policy.conf:8"}},
		{"agent cidr allow", "a1", "s1", "", "192.168.7.3", 80, Decision{true, "policy.conf:9"}},
		{"other agent gets no agent rule", "a0", "s1", "", "192.168.7.3", 80, Decision{false, "default: private"}},
		{"session rule before agent", "a1", "s2", "web.test", "198.51.100.7", 80, Decision{true, "policy.conf:12"}},
		{"session rule, other port falls to agent", "a1", "s2", "web.test", "198.51.100.7", 81, Decision{false, "policy.conf:8"}},
		{"same session name, other agent", "a0", "s2", "web.test", "198.51.100.7", 80, Decision{true, "default: allow"}},
		{"agent allow overrides global deny", "a2", "s", "x.evil.test", "198.51.100.7", 443, Decision{true, "policy.conf:15"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := p.Decide(tc.agent, tc.session, tc.host, netip.MustParseAddr(tc.ip), tc.port, own)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Decide(%s/%s, %s, %s, %d) (-want +got):\n%s", tc.agent, tc.session, tc.host, tc.ip, tc.port, diff)
			}
		})
	}
}

func TestDecideName(t *testing.T) {
	p, err := ParsePolicy("policy.conf", strings.NewReader(overridePolicy))
	if err != nil {
		t.Fatal(err)
	}
	dd, err := ParsePolicy("dd", strings.NewReader("allow cidr 10.0.2.2/32 port 8080\nallow host pkg.test\ndefault deny\n"))
	if err != nil {
		t.Fatal(err)
	}
	type verdict struct {
		D    Decision
		Sure bool
	}
	for _, tc := range []struct {
		p                    *Policy
		agent, session, name string
		port                 uint16
		want                 verdict
	}{
		{p, "a0", "s", "x.evil.test", 8085, verdict{Decision{Rule: "policy.conf:2"}, true}},
		{p, "a0", "s", "web.test", 80, verdict{}},
		{p, "a1", "s1", "web.test", 80, verdict{Decision{Rule: "policy.conf:8"}, true}},
		{p, "a1", "s2", "web.test", 80, verdict{}},                                       // the session allows it
		{p, "a1", "s1", "other.test", 80, verdict{}},                                     // the agent's cidr allow comes first
		{dd, "a", "s", "leak.attacker.test", 443, verdict{Decision{Rule: "dd:3"}, true}}, // never resolved
		{dd, "a", "s", "leak.attacker.test", 8080, verdict{}},                            // 10.0.2.2 might be its address
		{dd, "a", "s", "pkg.test", 443, verdict{}},
	} {
		d, sure := tc.p.DecideName(tc.agent, tc.session, tc.name, tc.port)
		if diff := cmp.Diff(tc.want, verdict{d, sure}); diff != "" {
			t.Errorf("DecideName(%s/%s, %s, %d) (-want +got):\n%s", tc.agent, tc.session, tc.name, tc.port, diff)
		}
	}
}

func TestDefaultDeny(t *testing.T) {
	p, err := ParsePolicy("p", strings.NewReader("default deny\nallow host pkg.test port 443\n"))
	if err != nil {
		t.Fatal(err)
	}
	pub := netip.MustParseAddr("198.51.100.7")
	for _, tc := range []struct {
		host string
		port uint16
		want Decision
	}{
		{"pkg.test", 443, Decision{true, "p:2"}},
		{"pkg.test", 22, Decision{false, "p:1"}},
		{"other.test", 443, Decision{false, "p:1"}},
		{"", 443, Decision{false, "p:1"}},
	} {
		if diff := cmp.Diff(tc.want, p.Decide("a", "s", tc.host, pub, tc.port, nil)); diff != "" {
			t.Errorf("%s:%d (-want +got):\n%s", tc.host, tc.port, diff)
		}
	}
	if got := p.Decide("a", "s", "pkg.test", netip.MustParseAddr("169.254.169.254"), 443, nil); got.Allow || got.Rule != "default: link-local" {
		t.Errorf("metadata under default deny: %+v", got)
	}
}

func TestParsePolicyErrors(t *testing.T) {
	for _, tc := range []struct{ text, want string }{
		{"allow host\n", "policy.conf:1: 2 words: write allow|deny"},
		{"# ok\npermit host a.test\n", "policy.conf:2: unknown action \"permit\""},
		{"allow name a.test\n", "unknown match \"name\""},
		{"allow host 10.0.0.1\n", "policy.conf:1: host \"10.0.0.1\" is an address: use \"cidr 10.0.0.1\""},
		{"allow host a_b!.test\n", "is not a host name"},
		{"allow host *.\n", "is not a host name"},
		{"deny cidr 10.0.0.1/8\n", "has host bits set: write 10.0.0.0/8"},
		{"deny cidr tenten\n", "is not an address or prefix"},
		{"\n\ndeny cidr 10.0.0.0/8 port 0\n", "policy.conf:3: port \"0\": write ports 1-65535"},
		{"deny cidr 10.0.0.0/8 port 90-80\n", "port \"90-80\""},
		{"deny cidr 10.0.0.0/8 port 65536\n", "port \"65536\""},
		{"deny cidr 10.0.0.0/8 ports 80\n", "expected \"port\""},
		{"[agent]\n", "unknown section [agent]"},
		{"[session s1]\n", "unknown section [session s1]: write [global], [agent AGENT] or [session AGENT/SESSION]"},
		{"[agent a\n", "has no closing ']'"},
		{"[agent a]\ndefault deny\n", "policy.conf:2: \"default\" is only allowed in the global part"},
		{"default maybe\n", "write \"default allow\" or \"default deny\""},
		{"default deny\ndefault allow\n", "policy.conf:2: the default is already set at policy.conf:1"},
	} {
		_, err := ParsePolicy("policy.conf", strings.NewReader(tc.text))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParsePolicy(%q) = %v, want an error containing %q", tc.text, err, tc.want)
		}
	}
}

// A reload that fails keeps the policy in force; one that succeeds replaces it.
func TestReloadKeepsPolicyOnError(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "policy.conf")
	write := func(s string) {
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("deny host web.test\n")
	b, err := New(Config{PolicyPath: path, AuditDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Shutdown()
	pub := netip.MustParseAddr("198.51.100.7")
	decide := func() Decision { return b.Policy().Decide("a", "s", "web.test", pub, 80, nil) }
	if d := decide(); d.Allow || d.Rule != path+":1" {
		t.Fatalf("before: %+v", d)
	}
	write("deny host web.test\nallow host web.test port eighty\n")
	err = b.Reload()
	if err == nil || !strings.Contains(err.Error(), path+":2: port \"eighty\"") {
		t.Fatalf("Reload() = %v, want the file:line of the bad port", err)
	}
	if d := decide(); d.Allow || d.Rule != path+":1" {
		t.Errorf("after a failed reload: %+v, want the previous policy's deny", d)
	}
	write("allow host web.test\n")
	if err := b.Reload(); err != nil {
		t.Fatal(err)
	}
	if d := decide(); !d.Allow || d.Rule != path+":1" {
		t.Errorf("after a good reload: %+v", d)
	}
	if _, err := New(Config{PolicyPath: filepath.Join(dir, "missing"), AuditDir: dir}); err == nil {
		t.Error("New with a missing policy file succeeded")
	}
}

func FuzzParsePolicy(f *testing.F) {
	f.Add(overridePolicy)
	f.Add("default deny\nallow cidr ::/0 port 1-65535\n")
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParsePolicy("f", strings.NewReader(s))
		if err != nil {
			if !strings.HasPrefix(err.Error(), "f:") {
				t.Errorf("error %q does not name the file", err)
			}
			return
		}
		p.Decide("a", "s", "x.test", netip.MustParseAddr("169.254.169.254"), 80, nil)
		if d := p.Decide("a", "s", "x.test", netip.MustParseAddr("169.254.169.254"), 80, nil); d.Allow && !strings.HasPrefix(d.Rule, "f:") {
			t.Errorf("metadata allowed by %q", d.Rule)
		}
	})
}
