package daemon

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/allox-os/allox/services/kuruwa/internal/wire"
)

// poolPeer is an instance daemon's side of pooled connections: it answers each request with
// {"result":"ok"} on the connection it came on, and counts the connections it accepted.
type poolPeer struct {
	sock     string
	mu       sync.Mutex
	accepted []net.Conn
}

func newPoolPeer(t *testing.T) *poolPeer {
	p := &poolPeer{sock: filepath.Join(t.TempDir(), "i.sock")}
	ln, err := net.Listen("unix", p.sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			p.accepted = append(p.accepted, nc)
			p.mu.Unlock()
			go func() {
				c := wire.NewConn(nc)
				for {
					var req wire.Request
					if c.Recv(&req) != nil {
						return
					}
					_ = c.Reply("ok", nil)
				}
			}()
		}
	}()
	return p
}

func (p *poolPeer) conns() []net.Conn {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]net.Conn(nil), p.accepted...)
}

func TestPoolReusesAnIdleConnection(t *testing.T) {
	p := newPoolPeer(t)
	d := &Daemon{}
	for range 5 {
		var got string
		if err := d.call(p.sock, "status", nil, &got); err != nil || got != "ok" {
			t.Fatalf("%q %v", got, err)
		}
	}
	if n := len(p.conns()); n != 1 {
		t.Fatalf("5 sequential requests used %d connections, want 1", n)
	}
}

// The instance daemon closed the idle connection (it exited, or dropped the client): the next
// request must go on a new connection, not fail on the dead one.
func TestPoolDiscardsAConnectionThePeerClosed(t *testing.T) {
	p := newPoolPeer(t)
	d := &Daemon{}
	if err := d.call(p.sock, "status", nil, nil); err != nil {
		t.Fatal(err)
	}
	p.conns()[0].Close()
	var got string
	if err := d.call(p.sock, "status", nil, &got); err != nil || got != "ok" {
		t.Fatalf("after the peer closed the idle connection: %q %v", got, err)
	}
	if n := len(p.conns()); n != 2 {
		t.Fatalf("%d connections, want a second one", n)
	}
}

// Bytes the peer sent unasked would be taken as the next request's reply: such a connection is
// never reused.
func TestPoolDiscardsAConnectionWithUnaskedBytes(t *testing.T) {
	p := newPoolPeer(t)
	d := &Daemon{}
	if err := d.call(p.sock, "status", nil, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := p.conns()[0].Write([]byte(`{"result":"stale"}` + "\n")); err != nil {
		t.Fatal(err)
	}
	// A write on a Unix stream socket is in the reader's queue when it returns: no race here.
	var got string
	if err := d.call(p.sock, "status", nil, &got); err != nil {
		t.Fatal(err)
	}
	if got != "ok" {
		t.Fatalf("reply %q: the unasked line was taken as the reply", got)
	}
}

func TestPoolKeepsAtMostTwoIdleAndDropsThem(t *testing.T) {
	p := newPoolPeer(t)
	d := &Daemon{}
	var held []*wire.Conn
	for range 4 {
		c, err := d.pool.get(p.sock)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	for _, c := range held {
		d.pool.put(p.sock, c, nil)
	}
	if n := len(d.pool.idle[p.sock]); n != maxIdlePerInstance {
		t.Fatalf("%d idle, want %d", n, maxIdlePerInstance)
	}
	d.pool.drop(p.sock)
	if n := len(d.pool.idle[p.sock]); n != 0 {
		t.Fatalf("%d idle after drop", n)
	}
	for _, c := range held {
		if _, err := c.Write([]byte("x")); err == nil {
			t.Fatal("a connection over the limit or dropped is still open")
		}
	}
}

// A request whose reply was not read whole leaves the connection out of step: it is closed, not
// returned to the pool.
func TestPoolClosesAConnectionAfterATransportError(t *testing.T) {
	p := newPoolPeer(t)
	d := &Daemon{}
	c, err := d.pool.get(p.sock)
	if err != nil {
		t.Fatal(err)
	}
	d.pool.put(p.sock, c, net.ErrClosed)
	if n := len(d.pool.idle[p.sock]); n != 0 {
		t.Fatalf("%d idle after a transport error", n)
	}
	d.pool.put(p.sock, mustGet(t, d, p.sock), wire.Errorf(wire.CodeNotFound, "id", "no"))
	if n := len(d.pool.idle[p.sock]); n != 1 {
		t.Fatalf("an error reply read whole should leave the connection reusable: %d idle", n)
	}
}

func mustGet(t *testing.T, d *Daemon, sock string) *wire.Conn {
	c, err := d.pool.get(sock)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// scriptedPeer is an instance daemon that misbehaves: it answers the nth request it reads (from
// 0, over all connections) with reply(n, conn).
func scriptedPeer(t *testing.T, reply func(n int, nc net.Conn)) string {
	sock := filepath.Join(t.TempDir(), "i.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var mu sync.Mutex
	n := 0
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { nc.Close() })
			go func() {
				r := bufio.NewReader(nc)
				for {
					if _, err := r.ReadBytes('\n'); err != nil {
						return
					}
					mu.Lock()
					i := n
					n++
					mu.Unlock()
					reply(i, nc)
				}
			}()
		}
	}()
	return sock
}

// A reply that announces more raw bytes than may follow is refused before they are read: what
// the peer sends next is still the first reply's, so the connection is not reused.
func TestPoolClosesAConnectionLeftInsideAReply(t *testing.T) {
	sock := scriptedPeer(t, func(n int, nc net.Conn) {
		if n > 0 {
			_, _ = nc.Write([]byte(`{"result":"ok"}` + "\n"))
			return
		}
		_, _ = nc.Write([]byte(fmt.Sprintf(`{"result":"first","raw":%d}`+"\n", wire.MaxLine+1)))
		time.Sleep(200 * time.Millisecond) // the raw bytes come later
		_, _ = nc.Write([]byte(`{"result":"raw bytes of the first reply"}` + "\n"))
	})
	d := &Daemon{}
	var got string
	if err := d.call(sock, "status", nil, &got); err == nil {
		t.Fatalf("a reply announcing %d raw bytes was accepted", wire.MaxLine+1)
	}
	if err := d.call(sock, "status", nil, &got); err != nil || got != "ok" {
		t.Fatalf("the next request got %q, %v: it read the rest of the first reply", got, err)
	}
}

// An instance dropped while one of its connections was out (its daemon exited during a request)
// keeps no connection: the one put back after the drop is closed, not pooled.
func TestPoolClosesAConnectionPutBackAfterItsInstanceWasDropped(t *testing.T) {
	var peer net.Conn
	answered := make(chan struct{})
	sock := scriptedPeer(t, func(n int, nc net.Conn) {
		peer = nc
		time.Sleep(300 * time.Millisecond)
		_, _ = nc.Write([]byte(`{"result":"ok"}` + "\n"))
		close(answered)
	})
	d := &Daemon{}
	done := make(chan error, 1)
	go func() { done <- d.call(sock, "status", nil, nil) }()
	time.Sleep(100 * time.Millisecond)
	d.pool.drop(sock)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	<-answered
	if n := len(d.pool.idle[sock]); n != 0 {
		t.Fatalf("%d idle connections to an instance dropped", n)
	}
	_ = peer.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := peer.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("the connection put back after the drop is still open: %v", err)
	}
}
