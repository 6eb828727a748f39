package netguard

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
)

// fixture is a guard on cgroups.guarded protecting two ports: listened, on
// which a dual-stack TCP listener plays the daemon, and free, which nothing
// holds (the daemon is down: a run would squat it). unprotected has a
// listener too. The guard's descriptors are closed before any test runs, so
// every attack test also shows that the guard outlives them.
type fixture struct {
	cgroups
	listened, free, unprotected string
}

func newFixture(tb testing.TB) fixture {
	tb.Helper()
	cg := newCgroups(tb)
	f := fixture{cgroups: cg}
	p, q, u := listening(tb), freePort(tb), listening(tb)
	g, err := Attach(cg.guarded, []uint16{p, q})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := Detach(cg.guarded); err != nil {
			tb.Error(err)
		}
	})
	if err := g.Close(); err != nil {
		tb.Fatal(err)
	}
	f.listened, f.free, f.unprotected = strconv.Itoa(int(p)), strconv.Itoa(int(q)), strconv.Itoa(int(u))
	return f
}

// attack runs args from the unguarded sibling, where it must succeed (the
// attack is real), then from the run, where the guard must refuse it.
func (f fixture) attack(t *testing.T, args ...string) {
	t.Helper()
	allowed(t, f.open, args...)
	refused(t, f.run, args...)
}

func TestConnectToProtectedPort(t *testing.T) {
	f := newFixture(t)
	addrs := []string{"127.0.0.1", "127.0.0.2", "::1", "::ffff:127.0.0.1", "0.0.0.0", "::"}
	own := ownAddrs(t)
	if len(own) == 0 {
		own = []netip.Addr{withDummyAddr(t)}
	}
	for _, a := range own {
		addrs = append(addrs, a.String())
	}
	for _, a := range addrs {
		t.Run("tcp "+a, func(t *testing.T) { f.attack(t, "connect", "tcp", a, f.listened) })
	}
	t.Run("hostname localhost", func(t *testing.T) { f.attack(t, "dial", "localhost:"+f.listened) })
	for _, a := range []string{"127.0.0.1", "::1"} {
		t.Run("fastopen "+a, func(t *testing.T) { f.attack(t, "fastopen", a, f.listened) })
	}
	t.Run("mptcp 127.0.0.1", func(t *testing.T) {
		if o := runProbe(t, f.open, "connect", "mptcp", "127.0.0.1", f.listened); strings.Contains(o.stderr, "socket mptcp") {
			t.Logf("no attack to try: this kernel has no MPTCP sockets (%s)", o.stderr)
			return
		}
		f.attack(t, "connect", "mptcp", "127.0.0.1", f.listened)
	})
}

func TestSendUDPToProtectedPort(t *testing.T) {
	f := newFixture(t)
	for _, a := range []string{"127.0.0.1", "::1", "::ffff:127.0.0.1", "127.0.0.2"} {
		t.Run("sendto "+a, func(t *testing.T) { f.attack(t, "sendto", a, f.listened) })
	}
	for _, a := range []string{"127.0.0.1", "::1", "::ffff:127.0.0.1"} {
		t.Run("connect "+a, func(t *testing.T) { f.attack(t, "connect", "udp", a, f.listened) })
	}
}

// TestBindProtectedPort is the squatting attack: while the daemon is not
// listening, a run binds its port to receive the requests meant for it.
func TestBindProtectedPort(t *testing.T) {
	f := newFixture(t)
	for _, proto := range []string{"tcp", "udp"} {
		for _, a := range []string{"0.0.0.0", "127.0.0.1", "::", "::1", "::ffff:127.0.0.1"} {
			t.Run(proto+" "+a, func(t *testing.T) { f.attack(t, "bind", proto, a, f.free) })
		}
	}
}

func TestUnprotectedPortStaysOpen(t *testing.T) {
	f := newFixture(t)
	allowed(t, f.run, "connect", "tcp", "127.0.0.1", f.unprotected)
	allowed(t, f.run, "connect", "tcp", "::1", f.unprotected)
	allowed(t, f.run, "sendto", "127.0.0.1", f.unprotected)
	allowed(t, f.run, "bind", "tcp", "127.0.0.1", strconv.Itoa(int(freePort(t))))
	allowed(t, f.run, "bind", "udp", "::", "0") // an ephemeral port
}

func TestOutsideReachesProtectedPort(t *testing.T) {
	f := newFixture(t)
	for _, dir := range []string{f.open, f.base} {
		allowed(t, dir, "connect", "tcp", "127.0.0.1", f.listened)
		allowed(t, dir, "bind", "tcp", "127.0.0.1", f.free)
	}
	c, err := net.Dial("tcp", "127.0.0.1:"+f.listened) // the test itself, in none of the test's groups
	if err != nil {
		t.Fatalf("from outside every guarded group: %v", err)
	}
	c.Close()
}

func TestGrandchildRefused(t *testing.T) {
	f := newFixture(t)
	refused(t, f.run, "spawn", "connect", "tcp", "127.0.0.1", f.listened)
	refused(t, f.run, "spawn", "spawn", "bind", "tcp", "0.0.0.0", f.free)
}

func TestCgroupCreatedAfterAttachRefused(t *testing.T) {
	f := newFixture(t)
	late := filepath.Join(f.guarded, "late")
	mkCgroup(t, late)
	deeper := filepath.Join(late, "agent", "session", "run")
	for _, d := range []string{filepath.Dir(filepath.Dir(deeper)), filepath.Dir(deeper), deeper} {
		mkCgroup(t, d)
	}
	for _, dir := range []string{f.guarded, late, deeper} {
		refused(t, dir, "connect", "tcp", "127.0.0.1", f.listened)
		refused(t, dir, "bind", "udp", "::", f.free)
	}
}

// withDummyAddr gives the machine an own address when it has none: a dummy
// interface with 198.18.0.1 (RFC 2544's benchmarking range), removed at
// cleanup.
func withDummyAddr(tb testing.TB) netip.Addr {
	tb.Helper()
	la := netlink.NewLinkAttrs()
	la.Name = fmt.Sprintf("ngtest%d", os.Getpid()%10000)
	dummy := &netlink.Dummy{LinkAttrs: la}
	if err := netlink.LinkAdd(dummy); err != nil {
		tb.Fatalf("add dummy interface: %v", err)
	}
	tb.Cleanup(func() { _ = netlink.LinkDel(dummy) })
	addr, err := netlink.ParseAddr("198.18.0.1/32")
	if err != nil {
		tb.Fatal(err)
	}
	if err := netlink.AddrAdd(dummy, addr); err != nil {
		tb.Fatalf("address dummy interface: %v", err)
	}
	if err := netlink.LinkSetUp(dummy); err != nil {
		tb.Fatalf("dummy interface up: %v", err)
	}
	return netip.MustParseAddr("198.18.0.1")
}
