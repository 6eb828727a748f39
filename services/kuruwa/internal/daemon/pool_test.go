package daemon

import (
	"net"
	"path/filepath"
	"sync"
	"testing"

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
