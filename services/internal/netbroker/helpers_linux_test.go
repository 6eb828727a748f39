package netbroker

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/allox-os/allox/internal/testenv"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// The test's three network namespaces, all made by the test:
//
//	session  only lo; the proxy's listener (127.0.0.1:3128) and the clients live here
//	daemon   the broker dials from here; veth "vd" 198.18.0.1/30 and 10.200.0.1/30
//	dest     the test servers; veth "vs" 198.18.0.2/30 and 10.200.0.2/30
//
// A session client can reach the servers only through the broker: its namespace has no route.
// 198.18.0.0/15 (RFC 2544, benchmarking) is outside the protected ranges, so the default policy
// allows it; 10.200.0.2 is private and denied unless a cidr rule allows it.
var (
	pubAddr  = netip.MustParseAddr("198.18.0.2")
	privAddr = netip.MustParseAddr("10.200.0.2")
)

// Ports of the test servers in dest.
const (
	httpPort  = 8080
	tlsPort   = 8443
	echoPort  = 2222
	stuckPort = 8099
	bulkPort  = 8081
)

type nsHandle = netns.NsHandle

type topology struct {
	session, daemon, dest nsHandle
	tlsPool               *x509.CertPool
	stuck                 chan struct{} // a connection reached the stuck server
}

// newNS makes a network namespace with lo up and returns a handle to it.
func newNS(tb testing.TB) netns.NsHandle {
	tb.Helper()
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		tb.Fatal(err)
	}
	defer orig.Close()
	ns, err := netns.New()
	if err != nil {
		runtime.UnlockOSThread()
		tb.Fatal(err)
	}
	if err := netns.Set(orig); err != nil {
		tb.Fatalf("restore the thread's namespace: %v", err) // the thread stays locked: it dies with the goroutine
	}
	runtime.UnlockOSThread()
	tb.Cleanup(func() { ns.Close() })
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		tb.Fatal(err)
	}
	defer h.Close()
	lo, err := h.LinkByName("lo")
	if err == nil {
		err = h.LinkSetUp(lo)
	}
	if err != nil {
		tb.Fatal(err)
	}
	return ns
}

// inNS runs fn on a thread in ns; sockets fn makes belong to ns for good.
func inNS(ns netns.NsHandle, fn func() error) error {
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer orig.Close()
	if err := netns.Set(ns); err != nil {
		runtime.UnlockOSThread()
		return err
	}
	ferr := fn()
	if err := netns.Set(orig); err != nil {
		return fmt.Errorf("restore the thread's namespace: %w", err) // thread stays locked and dies
	}
	runtime.UnlockOSThread()
	return ferr
}

func listenIn(tb testing.TB, ns netns.NsHandle, addr string) net.Listener {
	tb.Helper()
	var ln net.Listener
	if err := inNS(ns, func() (err error) { ln, err = net.Listen("tcp", addr); return err }); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ln.Close() })
	return ln
}

// nsDialer dials from a namespace.
type nsDialer struct{ ns netns.NsHandle }

func (d nsDialer) DialContext(ctx context.Context, network, addr string) (c net.Conn, err error) {
	err = inNS(d.ns, func() error {
		var dl net.Dialer
		c, err = dl.DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

func newTopology(tb testing.TB) *topology {
	tb.Helper()
	testenv.Root(tb, "to create network namespaces", "./services/internal/netbroker/")
	t := &topology{session: newNS(tb), daemon: newNS(tb), dest: newNS(tb)}
	h, err := netlink.NewHandleAt(t.daemon)
	if err != nil {
		tb.Fatal(err)
	}
	defer h.Close()
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "vd"}, PeerName: "vs", PeerNamespace: netlink.NsFd(t.dest)}
	if err := h.LinkAdd(veth); err != nil {
		tb.Fatalf("veth: %v", err)
	}
	setLink(tb, t.daemon, "vd", "198.18.0.1/30", "10.200.0.1/30")
	setLink(tb, t.dest, "vs", "198.18.0.2/30", "10.200.0.2/30")
	t.serve(tb)
	return t
}

func setLink(tb testing.TB, ns netns.NsHandle, name string, addrs ...string) {
	tb.Helper()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		tb.Fatal(err)
	}
	defer h.Close()
	l, err := h.LinkByName(name)
	if err != nil {
		tb.Fatal(err)
	}
	for _, a := range addrs {
		addr, err := netlink.ParseAddr(a)
		if err != nil {
			tb.Fatal(err)
		}
		addr.Flags |= 0x80 // IFA_F_NODAD: usable at once
		if err := h.AddrAdd(l, addr); err != nil {
			tb.Fatalf("%s %s: %v", name, a, err)
		}
	}
	if err := h.LinkSetUp(l); err != nil {
		tb.Fatal(err)
	}
}

// serve starts the test servers in dest: HTTP (echoes the path and the Host, and /size/N sends
// N bytes), TLS (the same handler), a line echo standing in for SSH, and a stuck server that
// accepts and never answers.
func (t *topology) serve(tb testing.TB) {
	tb.Helper()
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n, ok := strings.CutPrefix(r.URL.Path, "/size/"); ok {
			var size int64
			fmt.Sscan(n, &size)
			w.Header().Set("Content-Length", fmt.Sprint(size))
			io.CopyN(w, zeros{}, size)
			return
		}
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Connection", "keep-alive") // hop-by-hop: must not reach the client
		fmt.Fprintf(w, "path=%s host=%s proxy-conn=%q x-hop=%q body=%s", r.URL.Path, r.Host, r.Header.Get("Proxy-Connection"), r.Header.Get("X-Hop"), body)
	})
	for _, port := range []int{httpPort, bulkPort} {
		srv := &http.Server{Handler: handler}
		ln := listenIn(tb, t.dest, fmt.Sprintf(":%d", port))
		go srv.Serve(ln)
		tb.Cleanup(func() { srv.Close() })
	}
	ts := httptest.NewUnstartedServer(handler)
	ts.Listener.Close()
	ts.Listener = listenIn(tb, t.dest, fmt.Sprintf(":%d", tlsPort))
	ts.StartTLS()
	tb.Cleanup(ts.Close)
	t.tlsPool = x509.NewCertPool()
	t.tlsPool.AddCert(ts.Certificate())

	echo := listenIn(tb, t.dest, fmt.Sprintf(":%d", echoPort))
	go acceptLoop(echo, func(c net.Conn) {
		sc := bufio.NewScanner(c)
		for sc.Scan() {
			fmt.Fprintf(c, "echo %s\n", sc.Text())
		}
		c.Close()
	})
	stuck := listenIn(tb, t.dest, fmt.Sprintf(":%d", stuckPort))
	t.stuck = make(chan struct{}, 64)
	go acceptLoop(stuck, func(c net.Conn) {
		tb.Cleanup(func() { c.Close() })
		select {
		case t.stuck <- struct{}{}:
		default:
		}
	})
}

func acceptLoop(ln net.Listener, fn func(net.Conn)) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go fn(c)
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// mapResolver is the test's DNS: names to the test's addresses.
type mapResolver map[string][]netip.Addr

func (m mapResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := m[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

var testNames = mapResolver{
	"web.test":     {pubAddr},
	"example.com":  {pubAddr}, // the name httptest's certificate is for
	"rebind.test":  {netip.MustParseAddr("169.254.169.254")},
	"private.test": {privAddr},
	"mixed.test":   {netip.MustParseAddr("169.254.169.254"), pubAddr},
}

// fixture is a topology with a broker serving one session ("a1", "s1") in it.
type fixture struct {
	*topology
	b        *Broker
	policy   string // the policy file
	auditDir string
}

func newFixture(tb testing.TB, policy string, lim Limits, opts ...func(*Config)) *fixture {
	tb.Helper()
	f := &fixture{topology: newTopology(tb)}
	dir := tb.TempDir()
	f.policy, f.auditDir = filepath.Join(dir, "policy.conf"), filepath.Join(dir, "audit")
	if err := os.WriteFile(f.policy, []byte(policy), 0o600); err != nil {
		tb.Fatal(err)
	}
	if err := os.Mkdir(f.auditDir, 0o700); err != nil {
		tb.Fatal(err)
	}
	cfg := Config{
		PolicyPath: f.policy, AuditDir: f.auditDir, Limits: lim,
		Own:      []netip.Prefix{netip.MustParsePrefix("198.18.0.1/32")},
		Resolver: testNames, Dialer: nsDialer{f.daemon},
		AuditError: func(err error) { tb.Errorf("audit: %v", err) },
	}
	for _, o := range opts {
		o(&cfg)
	}
	b, err := New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	f.b = b
	tb.Cleanup(b.Shutdown)
	f.serveSession(tb, "a1", "s1")
	return f
}

// serveSession serves a session of the broker on a listener of its own namespace; it returns
// that namespace.
func (f *fixture) serveSession(tb testing.TB, agent, session string) netns.NsHandle {
	tb.Helper()
	ns := f.session
	if agent != "a1" || session != "s1" {
		ns = newNS(tb)
	}
	ln := listenIn(tb, ns, "127.0.0.1:3128")
	done := make(chan error, 1)
	go func() { done <- f.b.Serve(context.Background(), agent, session, ln) }()
	tb.Cleanup(func() {
		f.b.Close(agent, session)
		if err := <-done; err != nil {
			tb.Errorf("Serve %s/%s: %v", agent, session, err)
		}
	})
	return ns
}

// client is an HTTP client in ns using the proxy there; it trusts the test CA.
func (f *fixture) client(ns netns.NsHandle) *http.Client {
	proxy, _ := url.Parse("http://127.0.0.1:3128")
	return &http.Client{
		Timeout: 30 * time.Second,
		Transport: &http.Transport{
			Proxy:             http.ProxyURL(proxy),
			DialContext:       nsDialer{ns}.DialContext,
			TLSClientConfig:   &tls.Config{RootCAs: f.tlsPool},
			DisableKeepAlives: false,
		},
	}
}

// audit is every record kept so far.
func (f *fixture) audit(tb testing.TB) []Record {
	tb.Helper()
	p, err := ReadAudit(f.auditDir, Query{Limit: MaxPage})
	if err != nil {
		tb.Fatal(err)
	}
	return p.Records
}
