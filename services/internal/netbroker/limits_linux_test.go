package netbroker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"testing"
	"time"
)

// rebinder answers a name with a public address first and the metadata address afterwards, as
// a DNS-rebinding attacker's server with TTL 0 does.
type rebinder struct {
	mu    sync.Mutex
	calls int
}

func (r *rebinder) LookupNetIP(context.Context, string, string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls++
	if r.calls == 1 {
		return []netip.Addr{pubAddr}, nil
	}
	return []netip.Addr{netip.MustParseAddr("169.254.169.254")}, nil
}

// recordingDialer remembers every address the broker dialled.
type recordingDialer struct {
	Dialer
	mu     sync.Mutex
	dialed []string
}

func (d *recordingDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	d.mu.Lock()
	d.dialed = append(d.dialed, addr)
	d.mu.Unlock()
	return d.Dialer.DialContext(ctx, network, addr)
}

func TestDNSRebinding(t *testing.T) {
	res := &rebinder{}
	var dl *recordingDialer
	f := newFixture(t, "allow host rebind.test\n", Limits{}, func(c *Config) {
		c.Resolver = res
		dl = &recordingDialer{Dialer: c.Dialer}
		c.Dialer = dl
	})
	c := f.client(f.session)
	for i, want := range []int{200, 403, 403} {
		c.CloseIdleConnections() // a new connection to the destination each time
		resp, err := c.Get("http://rebind.test:8080/")
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("request %d: %d, want %d", i, resp.StatusCode, want)
		}
		if want == 403 && resp.Header.Get(DeniedHeader) != "default: link-local" {
			t.Errorf("request %d denied by %q", i, resp.Header.Get(DeniedHeader))
		}
	}
	// CONNECT and connect resolve once and dial what they checked, too
	resp, _, _ := rawCONNECT(t, f.session, "rebind.test:8080")
	if resp.StatusCode != 403 {
		t.Errorf("CONNECT after rebinding: %d", resp.StatusCode)
	}
	if err := f.b.Connect(context.Background(), "a1", "s1", "r", "rebind.test", 8080, nopStream{}); !errors.Is(err, ErrDenied) {
		t.Errorf("connect after rebinding: %v", err)
	}
	dl.mu.Lock()
	defer dl.mu.Unlock()
	for _, a := range dl.dialed {
		if a != "198.18.0.2:8080" {
			t.Errorf("the broker dialled %s", a)
		}
	}
	if len(dl.dialed) != 1 {
		t.Errorf("dialled %v, want the one checked address once", dl.dialed)
	}
}

type nopStream struct{}

func (nopStream) Read([]byte) (int, error)    { return 0, io.EOF }
func (nopStream) Write(p []byte) (int, error) { return len(p), nil }
func (nopStream) Close() error                { return nil }

func TestConnLimit(t *testing.T) {
	f := newFixture(t, "", Limits{MaxConns: 2})
	s2 := f.serveSession(t, "a1", "s2")
	var held []io.Closer
	for range 2 {
		resp, conn, _ := rawCONNECT(t, f.session, fmt.Sprintf("web.test:%d", echoPort))
		if resp.StatusCode != 200 {
			t.Fatalf("CONNECT within the limit: %d", resp.StatusCode)
		}
		held = append(held, conn)
	}
	resp, _, _ := rawCONNECT(t, f.session, fmt.Sprintf("web.test:%d", echoPort))
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("the third CONNECT: %d, want 503", resp.StatusCode)
	}
	if err := f.b.Connect(context.Background(), "a1", "s1", "r", "web.test", echoPort, nopStream{}); !errors.Is(err, ErrLimit) {
		t.Errorf("connect over the limit: %v, want ErrLimit", err)
	}
	r, err := f.client(f.session).Get("http://web.test:8080/")
	if err != nil || r.StatusCode != 503 {
		t.Errorf("GET over the limit: %v %v, want 503", r.StatusCode, err)
	}
	r.Body.Close()
	limited := 0
	for _, rec := range f.audit(t) {
		if rec.Decision == Limited {
			limited++
		}
	}
	if limited != 3 {
		t.Errorf("%d limit records, want 3 (CONNECT, connect, GET)", limited)
	}
	// another session is not held back by s1 being full
	r, err = f.client(s2).Get("http://web.test:8080/")
	if err != nil || r.StatusCode != 200 {
		t.Fatalf("the other session: %v %v", r, err)
	}
	r.Body.Close()
	// closing a tunnel gives its slot back
	held[0].Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, err := f.client(f.session).Get("http://web.test:8080/")
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		if r.StatusCode == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the slot of a closed tunnel never came back: %d", r.StatusCode)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A destination that accepts and never answers ends in the idle timeout, and another session's
// traffic goes through meanwhile.
func TestStuckDestination(t *testing.T) {
	const idle = 2 * time.Second
	f := newFixture(t, "", Limits{IdleTimeout: idle})
	s2 := f.serveSession(t, "a1", "s2")
	stuckGET := make(chan int, 1)
	start := time.Now()
	go func() {
		r, err := f.client(f.session).Get(fmt.Sprintf("http://web.test:%d/", stuckPort))
		if err != nil {
			stuckGET <- -1
			return
		}
		r.Body.Close()
		stuckGET <- r.StatusCode
	}()
	resp, conn, _ := rawCONNECT(t, f.session, fmt.Sprintf("web.test:%d", stuckPort))
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT to the stuck server: %d", resp.StatusCode)
	}
	for range 2 {
		select {
		case <-f.stuck:
		case <-time.After(10 * time.Second):
			t.Fatal("the stuck server was never reached")
		}
	}
	r, err := f.client(s2).Get("http://web.test:8080/")
	if err != nil || r.StatusCode != 200 {
		t.Fatalf("the other session: %v %v", r, err)
	}
	r.Body.Close()
	select {
	case s := <-stuckGET:
		t.Fatalf("the stuck GET ended (%d) before the other session's request; the test proves nothing", s)
	default:
	}
	if s := <-stuckGET; s != http.StatusGatewayTimeout {
		t.Errorf("the stuck GET: %d, want 504", s)
	}
	if d := time.Since(start); d < idle {
		t.Errorf("the stuck GET ended after %v, before the idle timeout %v", d, idle)
	}
	if n, err := conn.Read(make([]byte, 1)); err == nil {
		t.Errorf("the stuck tunnel read %d bytes and no error", n)
	}
	var gateway, tunnel bool
	for _, rec := range f.waitAudit(t, 3) {
		switch {
		case rec.Kind == KindHTTP && rec.Port == stuckPort:
			gateway = rec.Status == 504 && rec.Decision == Failed && rec.DurationNS >= idle.Nanoseconds()
		case rec.Kind == KindCONNECT:
			tunnel = rec.Decision == Allowed && rec.DurationNS >= idle.Nanoseconds()
		}
	}
	if !gateway || !tunnel {
		t.Errorf("audit: stuck GET recorded %v, stuck tunnel %v: %+v", gateway, tunnel, f.audit(t))
	}
}

// A tunnel that keeps moving bytes outlives the idle timeout (the kernel splices its bytes, so
// the watchdog reads progress from the sockets), and one that stops is closed after it.
func TestIdleTunnel(t *testing.T) {
	const idle = time.Second
	f := newFixture(t, "", Limits{IdleTimeout: idle})
	resp, conn, br := rawCONNECT(t, f.session, fmt.Sprintf("web.test:%d", echoPort))
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %d", resp.StatusCode)
	}
	start := time.Now()
	var up int64
	lines := 0
	for i := 0; time.Since(start) < 3*idle; i++ {
		lines++
		up += int64(len(fmt.Sprintf("line %d\n", i)))
		fmt.Fprintf(conn, "line %d\n", i)
		if got, err := br.ReadString('\n'); err != nil || got != fmt.Sprintf("echo line %d\n", i) {
			t.Fatalf("after %v of traffic: %q %v: an active tunnel was closed", time.Since(start), got, err)
		}
		time.Sleep(idle / 4)
	}
	quiet := time.Now()
	conn.SetReadDeadline(time.Now().Add(10 * idle))
	if _, err := br.ReadByte(); err == nil {
		t.Fatal("a quiet tunnel sent a byte")
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("a quiet tunnel was not closed within %v", 10*idle)
	}
	if d := time.Since(quiet); d < idle/2 {
		t.Errorf("the quiet tunnel was closed after %v, well before the idle timeout %v", d, idle)
	}
	rec := f.waitAudit(t, 1)[0]
	if rec.Kind != KindCONNECT || rec.BytesUp != up || rec.BytesDown != up+int64(lines*len("echo ")) || rec.DurationNS < (3*idle).Nanoseconds() {
		t.Errorf("audit: %+v, want %d bytes up and %d down over %d lines", rec, up, up+int64(lines*len("echo ")), lines)
	}
}
