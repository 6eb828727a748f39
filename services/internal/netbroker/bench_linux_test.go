package netbroker

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/allox-os/allox/internal/testenv"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// BenchmarkProxy measures the broker against a direct connection in the same run, over the
// test's veth (the direct client sits in the daemon's namespace, where the broker dials from):
// a small GET's latency (p50/p99 over 400 interleaved samples each way, keep-alive on both), a
// 100 MiB download's throughput (5 interleaved samples each: direct, forward-proxied, through a
// CONNECT tunnel, and through Debian's socat with 256 KiB buffers as the reference relay, since
// on an unbounded veth the direct transfer is CPU-bound and any relay that terminates TCP adds a
// second connection's kernel work per byte), and new connections per second (a CONNECT tunnel carrying one line to the echo server and back, against a direct
// dial doing the same; 10 interleaved rounds of 50). Every proxied request is audited, as in
// production. It ignores b.N: run it once.
//
//	go test -run '^$' -bench Proxy -benchtime 1x ./services/internal/netbroker/
func BenchmarkProxy(b *testing.B) {
	f := newFixture(b, "", Limits{})
	proxied := f.client(f.session)
	direct := &http.Client{Transport: &http.Transport{DialContext: nsDialer{f.daemon}.DialContext}}

	const samples = 400
	var dl, pl []time.Duration
	for range samples {
		dl = append(dl, timeGET(b, direct, "http://198.18.0.2:8080/hello"))
		pl = append(pl, timeGET(b, proxied, "http://web.test:8080/hello"))
	}
	dp50, dp99 := testenv.Percentile(dl, 50), testenv.Percentile(dl, 99)
	pp50, pp99 := testenv.Percentile(pl, 50), testenv.Percentile(pl, 99)
	b.ReportMetric(us(dp50), "direct-p50-µs")
	b.ReportMetric(us(pp50), "proxy-p50-µs")
	b.ReportMetric(us(pp50-dp50), "added-p50-µs")
	b.ReportMetric(us(dp99), "direct-p99-µs")
	b.ReportMetric(us(pp99), "proxy-p99-µs")

	// a 100 MiB download: direct, forward-proxied, and through a CONNECT tunnel (how https,
	// pip, npm and git go), interleaved
	tunnel := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		c, err := nsDialer{f.session}.DialContext(ctx, "tcp", "127.0.0.1:3128")
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(c, "CONNECT web.test:%d HTTP/1.1\r\nHost: web.test\r\n\r\n", bulkPort)
		return &connectConn{Conn: c}, nil
	}}}
	// and the reference every TCP-terminating proxy is held to: Debian's socat relaying the
	// same bytes between the same two namespaces, with no policy and no audit
	relayed := socatClient(b, f.topology)
	const size, bulk = 100 << 20, 5
	var dt, pt, tt, st time.Duration
	for range bulk {
		dt += timeGET(b, direct, fmt.Sprintf("http://198.18.0.2:%d/size/%d", bulkPort, size))
		pt += timeGET(b, proxied, fmt.Sprintf("http://web.test:%d/size/%d", bulkPort, size))
		tt += timeGET(b, tunnel, fmt.Sprintf("http://web.test:%d/size/%d", bulkPort, size))
		st += timeGET(b, relayed, fmt.Sprintf("http://198.18.0.2:%d/size/%d", bulkPort, size))
	}
	mib := float64(size*bulk) / (1 << 20)
	b.ReportMetric(mib/dt.Seconds(), "direct-MiB/s")
	b.ReportMetric(mib/pt.Seconds(), "proxy-MiB/s")
	b.ReportMetric(mib/tt.Seconds(), "tunnel-MiB/s")
	b.ReportMetric(mib/st.Seconds(), "socat-MiB/s")
	b.ReportMetric(dt.Seconds()/pt.Seconds(), "proxy/direct-throughput")
	b.ReportMetric(dt.Seconds()/tt.Seconds(), "tunnel/direct-throughput")
	b.ReportMetric(dt.Seconds()/st.Seconds(), "socat/direct-throughput")
	b.ReportMetric(st.Seconds()/tt.Seconds(), "tunnel/socat-throughput")

	// The same download over a link bounded at 1 Gbit/s (a tbf qdisc on the destination's side
	// of the veth), as a guest's uplink is bounded: whether the broker keeps up with the link,
	// rather than what its extra TCP hop costs a CPU-bound loopback.
	shapeLink(b, f.dest, "vs", 1_000_000_000/8)
	const shaped = 3
	var dsh, psh time.Duration
	for range shaped {
		dsh += timeGET(b, direct, fmt.Sprintf("http://198.18.0.2:%d/size/%d", bulkPort, size))
		psh += timeGET(b, proxied, fmt.Sprintf("http://web.test:%d/size/%d", bulkPort, size))
	}
	shmib := float64(size*shaped) / (1 << 20)
	b.ReportMetric(shmib/dsh.Seconds(), "1gbit-direct-MiB/s")
	b.ReportMetric(shmib/psh.Seconds(), "1gbit-proxy-MiB/s")
	b.ReportMetric(dsh.Seconds()/psh.Seconds(), "1gbit-proxy/direct-throughput")
	unshapeLink(b, f.dest, "vs")

	const rounds, per = 10, 50
	var dc, pc time.Duration
	for range rounds {
		dc += timeConns(b, per, func() net.Conn {
			c, err := nsDialer{f.daemon}.DialContext(context.Background(), "tcp", fmt.Sprintf("198.18.0.2:%d", echoPort))
			if err != nil {
				b.Fatal(err)
			}
			return c
		})
		pc += timeConns(b, per, func() net.Conn {
			c, err := nsDialer{f.session}.DialContext(context.Background(), "tcp", "127.0.0.1:3128")
			if err != nil {
				b.Fatal(err)
			}
			fmt.Fprintf(c, "CONNECT web.test:%d HTTP/1.1\r\nHost: web.test\r\n\r\n", echoPort)
			return &connectConn{Conn: c}
		})
	}
	n := float64(rounds * per)
	b.ReportMetric(n/dc.Seconds(), "direct-conns/s")
	b.ReportMetric(n/pc.Seconds(), "proxy-conns/s")
	b.ReportMetric(dc.Seconds()/pc.Seconds(), "proxy/direct-conns")
	b.Logf("small GET: p50 direct %.0f µs, proxy %.0f µs (+%.0f µs); p99 direct %.0f µs, proxy %.0f µs (%d samples each)",
		us(dp50), us(pp50), us(pp50-dp50), us(dp99), us(pp99), samples)
	b.Logf("100 MiB: direct %.0f MiB/s, proxy %.0f MiB/s (%.0f %%, %d samples each)",
		mib/dt.Seconds(), mib/pt.Seconds(), 100*dt.Seconds()/pt.Seconds(), bulk)
	b.Logf("100 MiB through CONNECT: %.0f MiB/s (%.0f %% of direct, %d samples each)", mib/tt.Seconds(), 100*dt.Seconds()/tt.Seconds(), bulk)
	b.Logf("100 MiB through socat, the reference relay: %.0f MiB/s (%.0f %% of direct; CONNECT is %.0f %% of socat, %d samples each)",
		mib/st.Seconds(), 100*dt.Seconds()/st.Seconds(), 100*st.Seconds()/tt.Seconds(), bulk)
	b.Logf("100 MiB over a 1 Gbit/s link: direct %.0f MiB/s, proxy %.0f MiB/s (%.0f %%, %d samples each)",
		shmib/dsh.Seconds(), shmib/psh.Seconds(), 100*dsh.Seconds()/psh.Seconds(), shaped)
	b.Logf("connections: direct %.0f/s, proxy %.0f/s (%.0f %%, %d each)", n/dc.Seconds(), n/pc.Seconds(), 100*dc.Seconds()/pc.Seconds(), rounds*per)
}

// socatClient is an HTTP client whose every connection goes through its own socat (Debian's,
// started inetd-style on the accepted connection): the client dials 127.0.0.1:3129 in the
// session's namespace, socat runs in the daemon's and connects to the destination. It is the
// broker's CONNECT path with a stock relay in its place.
func socatClient(b *testing.B, t *topology) *http.Client {
	b.Helper()
	socat, err := exec.LookPath("socat")
	if err != nil {
		testenv.Unavailable(b, "socat (Debian package socat), the reference relay: %v", err)
	}
	ln := listenIn(b, t.session, "127.0.0.1:3129")
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			f, err := c.(*net.TCPConn).File()
			c.Close()
			if err != nil {
				b.Error(err)
				return
			}
			cmd := exec.Command(socat, "-b", "262144", "FD:3", fmt.Sprintf("TCP:198.18.0.2:%d", bulkPort))
			cmd.ExtraFiles = []*os.File{f}
			if err := inNS(t.daemon, cmd.Start); err != nil {
				b.Error(err)
			}
			f.Close()
			go cmd.Wait()
		}
	}()
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return nsDialer{t.session}.DialContext(ctx, "tcp", "127.0.0.1:3129")
	}}}
}

// connectConn reads the proxy's 200 before the tunnel's bytes.
type connectConn struct {
	net.Conn
	br *bufio.Reader
}

func (c *connectConn) Read(p []byte) (int, error) {
	if c.br == nil {
		c.br = bufio.NewReader(c.Conn)
		resp, err := http.ReadResponse(c.br, &http.Request{Method: "CONNECT"})
		if err != nil {
			return 0, err
		}
		if resp.StatusCode != 200 {
			return 0, fmt.Errorf("CONNECT: %s", resp.Status)
		}
	}
	return c.br.Read(p)
}

func timeGET(b *testing.B, c *http.Client, url string) time.Duration {
	start := time.Now()
	resp, err := c.Get(url)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		b.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		b.Fatalf("%s: %s", url, resp.Status)
	}
	return time.Since(start)
}

// timeConns opens n connections one after the other with dial, sends a line on each, reads the
// echo and closes it.
func timeConns(b *testing.B, n int, dial func() net.Conn) time.Duration {
	start := time.Now()
	for range n {
		c := dial()
		fmt.Fprintf(c, "ping\n")
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil || line != "echo ping\n" {
			b.Fatalf("echo: %q %v", line, err)
		}
		c.Close()
	}
	return time.Since(start)
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// shapeLink bounds the egress of link name in ns at rate bytes/s (a tbf qdisc).
func shapeLink(tb testing.TB, ns netns.NsHandle, name string, rate uint64) {
	tb.Helper()
	h, tbf := linkTbf(tb, ns, name)
	defer h.Close()
	tbf.Rate, tbf.Limit, tbf.Buffer = rate, uint32(rate/10), uint32(rate/100)
	if err := h.QdiscAdd(tbf); err != nil {
		tb.Fatalf("tbf on %s: %v", name, err)
	}
}

// unshapeLink removes shapeLink's qdisc.
func unshapeLink(tb testing.TB, ns netns.NsHandle, name string) {
	tb.Helper()
	h, tbf := linkTbf(tb, ns, name)
	defer h.Close()
	if err := h.QdiscDel(tbf); err != nil {
		tb.Fatalf("remove the tbf on %s: %v", name, err)
	}
}

// linkTbf is a netlink handle in ns and the root tbf qdisc of link name there.
func linkTbf(tb testing.TB, ns netns.NsHandle, name string) (*netlink.Handle, *netlink.Tbf) {
	tb.Helper()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		tb.Fatal(err)
	}
	l, err := h.LinkByName(name)
	if err != nil {
		h.Close()
		tb.Fatal(err)
	}
	return h, &netlink.Tbf{QdiscAttrs: netlink.QdiscAttrs{LinkIndex: l.Attrs().Index, Handle: netlink.MakeHandle(1, 0), Parent: netlink.HANDLE_ROOT}}
}
