package netbroker

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// matrixPolicy: line numbers are asserted below.
const matrixPolicy = `# the test's policy
deny host deny.test          # deny.test is not in the test resolver: denied before any lookup
allow cidr 10.200.0.2/32 port 8080
allow host example.com port 8443
deny cidr 198.18.0.2/32 port 8443
allow host rebind.test
`

// ignore what cannot be predicted; bytes of TLS and durations are checked separately.
var recordOpts = cmpopts.IgnoreFields(Record{}, "Time", "DurationNS", "Error")

// waitAudit waits for the audit to hold n records and returns them.
func (f *fixture) waitAudit(tb testing.TB, n int) []Record {
	tb.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		rs := f.audit(tb)
		if len(rs) >= n || time.Now().After(deadline) {
			if len(rs) != n {
				tb.Fatalf("audit has %d records, want %d: %+v", len(rs), n, rs)
			}
			for _, r := range rs {
				if r.Time.IsZero() || r.DurationNS <= 0 {
					tb.Errorf("record without time or duration: %+v", r)
				}
			}
			return rs
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestHTTP(t *testing.T) {
	f := newFixture(t, matrixPolicy, Limits{})
	c := f.client(f.session)
	for _, tc := range []struct {
		name, url string
		status    int
		body      string // allowed: the body; denied: the rule, which is also in the header
		want      Record
	}{
		{"allowed by default", "http://web.test:8080/hello", 200, "path=/hello host=web.test:8080 proxy-conn=\"\" x-hop=\"\" body=",
			Record{Host: "web.test", Address: "198.18.0.2", Port: 8080, Decision: Allowed, Rule: "default: allow"}},
		{"allowed by IP literal", "http://198.18.0.2:8080/ip", 200, "path=/ip host=198.18.0.2:8080 proxy-conn=\"\" x-hop=\"\" body=",
			Record{Host: "198.18.0.2", Address: "198.18.0.2", Port: 8080, Decision: Allowed, Rule: "default: allow"}},
		{"private opened by a cidr rule", "http://private.test:8080/p", 200, "path=/p host=private.test:8080 proxy-conn=\"\" x-hop=\"\" body=",
			Record{Host: "private.test", Address: "10.200.0.2", Port: 8080, Decision: Allowed, Rule: f.policy + ":3"}},
		{"a denied address of a name is skipped", "http://mixed.test:8080/m", 200, "path=/m host=mixed.test:8080 proxy-conn=\"\" x-hop=\"\" body=",
			Record{Host: "mixed.test", Address: "198.18.0.2", Port: 8080, Decision: Allowed, Rule: "default: allow"}},
		{"denied by a host rule", "http://deny.test:8080/", 403, f.policy + ":2",
			Record{Host: "deny.test", Port: 8080, Decision: Denied, Rule: f.policy + ":2"}},
		{"private, other port", "http://10.200.0.2:8081/", 403, "default: private",
			Record{Host: "10.200.0.2", Port: 8081, Decision: Denied, Rule: "default: private"}},
		{"the guest's own address", "http://198.18.0.1:8080/", 403, "default: own",
			Record{Host: "198.18.0.1", Port: 8080, Decision: Denied, Rule: "default: own"}},
		{"loopback", "http://127.0.0.1:3128/", 403, "default: loopback",
			Record{Host: "127.0.0.1", Port: 3128, Decision: Denied, Rule: "default: loopback"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := len(f.audit(t))
			req, _ := http.NewRequest("GET", tc.url, nil)
			req.Header.Set("Proxy-Connection", "keep-alive")
			req.Header.Set("Connection", "X-Hop")
			req.Header.Set("X-Hop", "must not pass")
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, body)
			}
			switch tc.status {
			case 200:
				if string(body) != tc.body {
					t.Errorf("body %q, want %q", body, tc.body)
				}
				tc.want.BytesDown = int64(len(body))
			case 403:
				if got := resp.Header.Get(DeniedHeader); got != tc.body || !strings.Contains(string(body), tc.body) {
					t.Errorf("403 names %q (header) and %q (body), want %q", got, body, tc.body)
				}
			}
			tc.want.AgentID, tc.want.SessionID, tc.want.Kind, tc.want.Method, tc.want.Status = "a1", "s1", KindHTTP, "GET", tc.status
			got := f.waitAudit(t, n+1)[n]
			if diff := cmp.Diff(tc.want, got, recordOpts); diff != "" {
				t.Errorf("audit (-want +got):\n%s", diff)
			}
		})
	}
	t.Run("POST body counted", func(t *testing.T) {
		n := len(f.audit(t))
		resp, err := c.Post("http://web.test:8080/post", "text/plain", strings.NewReader("twelve bytes"))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		got := f.waitAudit(t, n+1)[n]
		if got.BytesUp != 12 || got.BytesDown != int64(len(body)) || got.Method != "POST" || !strings.HasSuffix(string(body), "body=twelve bytes") {
			t.Errorf("POST: body %q, record %+v", body, got)
		}
	})
	t.Run("origin-form request refused", func(t *testing.T) {
		conn := dialProxy(t, f.session)
		fmt.Fprintf(conn, "GET /x HTTP/1.1\r\nHost: web.test:8080\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 400 {
			t.Errorf("status %d, want 400", resp.StatusCode)
		}
	})
}

func dialProxy(tb testing.TB, ns nsHandle) net.Conn {
	tb.Helper()
	c, err := nsDialer{ns}.DialContext(context.Background(), "tcp", "127.0.0.1:3128")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return c
}

// rawCONNECT sends CONNECT target on a new proxy connection and returns the response.
func rawCONNECT(tb testing.TB, ns nsHandle, target string) (*http.Response, net.Conn, *bufio.Reader) {
	tb.Helper()
	conn := dialProxy(tb, ns)
	fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"})
	if err != nil {
		tb.Fatal(err)
	}
	return resp, conn, br
}

func TestCONNECT(t *testing.T) {
	f := newFixture(t, matrixPolicy, Limits{})
	t.Run("TLS allowed, CA verified", func(t *testing.T) {
		resp, err := f.client(f.session).Get(fmt.Sprintf("https://example.com:%d/tls", tlsPort))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if want := "path=/tls host=example.com:8443"; !strings.HasPrefix(string(body), want) || resp.TLS == nil {
			t.Errorf("body %q over TLS %v, want %q", body, resp.TLS != nil, want)
		}
		f.b.Close("a1", "s1") // ends the tunnel so that its record is written
		got := f.waitAudit(t, 1)[0]
		want := Record{AgentID: "a1", SessionID: "s1", Kind: KindCONNECT, Method: "CONNECT", Host: "example.com",
			Address: "198.18.0.2", Port: tlsPort, Decision: Allowed, Rule: f.policy + ":4", Status: 200}
		if diff := cmp.Diff(want, got, recordOpts, cmpopts.IgnoreFields(Record{}, "BytesUp", "BytesDown")); diff != "" {
			t.Errorf("audit (-want +got):\n%s", diff)
		}
		if got.BytesUp < 200 || got.BytesDown < int64(len(body))+500 { // a handshake and a response at least
			t.Errorf("bytes up %d down %d: too few for a TLS exchange", got.BytesUp, got.BytesDown)
		}
	})
	f.serveSession(t, "a1", "s1") // served again after the Close above
	t.Run("TLS to a name the CA does not cover", func(t *testing.T) {
		_, err := f.client(f.session).Get(fmt.Sprintf("https://198.18.0.2:%d/", 8080))
		if err == nil {
			t.Fatal("TLS to a plain HTTP server succeeded")
		}
	})
	for _, tc := range []struct{ target, rule string }{
		{"web.test:8443", f.policy + ":5"}, // the port is denied for every name but example.com
		{"deny.test:8443", f.policy + ":2"},
		{"rebind.test:8080", "default: link-local"}, // allowed by name, resolves to the metadata address
		{"10.200.0.2:2222", "default: private"},
	} {
		t.Run("denied "+tc.target, func(t *testing.T) {
			resp, _, _ := rawCONNECT(t, f.session, tc.target)
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != 403 || resp.Header.Get(DeniedHeader) != tc.rule || !strings.Contains(string(body), tc.rule) {
				t.Errorf("CONNECT %s: %d %q header %q, want 403 naming %s", tc.target, resp.StatusCode, body, resp.Header.Get(DeniedHeader), tc.rule)
			}
			// this request's record: an earlier tunnel's is written when that tunnel ends, which
			// may be after this one
			host, port, _ := net.SplitHostPort(tc.target)
			var got Record
			for _, r := range f.audit(t) {
				if r.Host == host && strconv.Itoa(int(r.Port)) == port {
					got = r
				}
			}
			if got.Decision != Denied || got.Rule != tc.rule || got.Kind != KindCONNECT || got.Status != 403 || got.Address != "" {
				t.Errorf("audit %+v", got)
			}
		})
	}
	t.Run("unreachable destination", func(t *testing.T) {
		resp, _, _ := rawCONNECT(t, f.session, "web.test:1")
		if resp.StatusCode != 502 {
			t.Errorf("CONNECT to a closed port: %d, want 502", resp.StatusCode)
		}
	})
}

func TestConnect(t *testing.T) {
	f := newFixture(t, matrixPolicy, Limits{})
	t.Run("relayed and audited with the run", func(t *testing.T) {
		client, stream := net.Pipe()
		done := make(chan error, 1)
		go func() { done <- f.b.Connect(context.Background(), "a1", "s1", "r7", "web.test", echoPort, stream) }()
		br := bufio.NewReader(client)
		fmt.Fprintf(client, "SSH-2.0-test\n")
		line, err := br.ReadString('\n')
		if err != nil || line != "echo SSH-2.0-test\n" {
			t.Fatalf("relay: %q, %v", line, err)
		}
		client.Close()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		got := f.waitAudit(t, 1)[0]
		want := Record{AgentID: "a1", SessionID: "s1", RunID: "r7", Kind: KindConnect, Method: "connect", Host: "web.test",
			Address: "198.18.0.2", Port: echoPort, Decision: Allowed, Rule: "default: allow", BytesUp: 13, BytesDown: 18}
		if diff := cmp.Diff(want, got, recordOpts); diff != "" {
			t.Errorf("audit (-want +got):\n%s", diff)
		}
	})
	for _, tc := range []struct {
		host string
		port uint16
		rule string
	}{
		{"deny.test", echoPort, f.policy + ":2"},
		{"rebind.test", echoPort, "default: link-local"},
		{"web.test", tlsPort, f.policy + ":5"},
	} {
		t.Run(fmt.Sprintf("denied %s:%d", tc.host, tc.port), func(t *testing.T) {
			n := len(f.audit(t))
			_, stream := net.Pipe()
			err := f.b.Connect(context.Background(), "a1", "s1", "r8", tc.host, tc.port, stream)
			var de *DeniedError
			if !errors.As(err, &de) || de.Rule != tc.rule || !errors.Is(err, ErrDenied) {
				t.Fatalf("Connect = %v, want denied by %s", err, tc.rule)
			}
			got := f.waitAudit(t, n+1)[n]
			want := Record{AgentID: "a1", SessionID: "s1", RunID: "r8", Kind: KindConnect, Method: "connect", Host: tc.host,
				Port: tc.port, Decision: Denied, Rule: tc.rule}
			if diff := cmp.Diff(want, got, recordOpts); diff != "" {
				t.Errorf("audit (-want +got):\n%s", diff)
			}
		})
	}
}

// The session's namespace has no route: the only way out is the broker.
func TestSessionCannotBypass(t *testing.T) {
	f := newFixture(t, "", Limits{})
	for _, addr := range []string{"198.18.0.2:8080", "10.200.0.2:8080", "198.18.0.1:80"} {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		c, err := nsDialer{f.session}.DialContext(ctx, "tcp", addr)
		cancel()
		if err == nil {
			c.Close()
			t.Errorf("a direct connect from the session to %s succeeded", addr)
		}
	}
	// and the daemon's namespace does reach it, so the failure above is the session's, not the server's
	c, err := nsDialer{f.daemon}.DialContext(context.Background(), "tcp", "198.18.0.2:8080")
	if err != nil {
		t.Fatalf("the daemon's namespace cannot reach the test server: %v", err)
	}
	c.Close()
}

// Reloading with a broken file keeps the old policy for the running proxy, too.
func TestReloadServing(t *testing.T) {
	f := newFixture(t, "deny host web.test\n", Limits{})
	c := f.client(f.session)
	get := func() int {
		resp, err := c.Get("http://web.test:8080/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if s := get(); s != 403 {
		t.Fatalf("before: %d", s)
	}
	writeFile(t, f.policy, "allow host web.test port http\n")
	if err := f.b.Reload(); err == nil {
		t.Fatal("a bad policy reloaded")
	}
	if s := get(); s != 403 {
		t.Errorf("after a failed reload: %d, want the old policy's 403", s)
	}
	writeFile(t, f.policy, "# allow everything\n")
	if err := f.b.Reload(); err != nil {
		t.Fatal(err)
	}
	if s := get(); s != 200 {
		t.Errorf("after a good reload: %d", s)
	}
}

func TestOverridesServing(t *testing.T) {
	f := newFixture(t, "[agent a1]\ndeny host web.test\n[session a1/s2]\nallow host web.test\n", Limits{})
	s2 := f.serveSession(t, "a1", "s2")
	for _, tc := range []struct {
		ns     nsHandle
		status int
	}{{f.session, 403}, {s2, 200}} {
		resp, err := f.client(tc.ns).Get("http://web.test:8080/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.status {
			t.Errorf("status %d, want %d", resp.StatusCode, tc.status)
		}
	}
}

func writeFile(tb testing.TB, path, s string) {
	tb.Helper()
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		tb.Fatal(err)
	}
}

func TestServeLifecycle(t *testing.T) {
	f := newFixture(t, "", Limits{})
	ns := newNS(t)
	get := func() int {
		r, err := f.client(ns).Get("http://web.test:8080/")
		if err != nil {
			t.Logf("GET: %v", err)
			return -1
		}
		r.Body.Close()
		return r.StatusCode
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	ln := listenIn(t, ns, "127.0.0.1:3128") // listening before get() dials it
	go func() { done <- f.b.Serve(ctx, "a2", "s", ln) }()
	if s := get(); s != 200 {
		t.Fatalf("served: %d", s)
	}
	if err := f.b.Serve(context.Background(), "a2", "s", listenIn(t, ns, "127.0.0.1:3129")); !errors.Is(err, ErrServing) {
		t.Errorf("a second Serve of the session: %v, want ErrServing", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Serve after its context ended: %v", err)
	}
	if s := get(); s != -1 {
		t.Errorf("after the context ended the proxy still answers: %d", s)
	}
	ln = listenIn(t, ns, "127.0.0.1:3128")
	go func() { done <- f.b.Serve(context.Background(), "a2", "s", ln) }()
	if s := get(); s != 200 {
		t.Errorf("served again: %d", s)
	}
	f.b.Shutdown()
	if err := <-done; err != nil {
		t.Errorf("Serve after Shutdown: %v", err)
	}
	if err := f.b.Serve(context.Background(), "a2", "s", listenIn(t, ns, "127.0.0.1:3128")); !errors.Is(err, ErrClosed) {
		t.Errorf("Serve on a shut broker: %v, want ErrClosed", err)
	}
}
