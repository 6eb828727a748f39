package daemon

import (
	"errors"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/allox-os/allox/services/kuruwa/internal/wire"
	"golang.org/x/sys/unix"
)

// instancePool keeps a few idle connections to each instance daemon, so that a relayed request
// pays neither a connect nor an accept and a new goroutine in the instance daemon. Streams
// (tail, attach) dial their own. Connections of an instance that is gone are dropped with it.
type instancePool struct {
	mu   sync.Mutex
	idle map[string][]*wire.Conn // by socket path
	out  map[string]int          // connections get handed out and put has not taken back
	gone map[string]bool         // dropped while some were out: put closes them
}

const maxIdlePerInstance = 2

// get is an idle connection to sock that is still open, or a new one.
func (p *instancePool) get(sock string) (*wire.Conn, error) {
	p.mu.Lock()
	for l := p.idle[sock]; len(l) > 0; l = p.idle[sock] {
		c := l[len(l)-1]
		p.idle[sock] = l[:len(l)-1]
		if idleAndOpen(c) {
			p.lendLocked(sock)
			p.mu.Unlock()
			return c, nil
		}
		c.Close()
	}
	p.mu.Unlock()
	nc, err := net.DialTimeout("unix", sock, 2*time.Second)
	if err != nil {
		return nil, wire.Errorf(wire.CodeGone, "instance", "instance daemon does not answer: %v", err)
	}
	p.mu.Lock()
	p.lendLocked(sock)
	p.mu.Unlock()
	return wire.NewConn(nc), nil
}

func (p *instancePool) lendLocked(sock string) {
	if p.out == nil {
		p.out, p.gone = map[string]int{}, map[string]bool{}
	}
	p.out[sock]++
}

// put takes back c, which get handed out, and keeps it if the request left it at a message
// boundary: the reply was read whole, a result or the peer's error reply (a *wire.Error as the
// peer sent it; one that wraps it says what went wrong in the middle of a reply). A connection
// of an instance dropped meanwhile is closed.
func (p *instancePool) put(sock string, c *wire.Conn, err error) {
	_, whole := err.(*wire.Error)
	p.mu.Lock()
	defer p.mu.Unlock()
	gone := p.gone[sock]
	if p.out[sock]--; p.out[sock] <= 0 {
		delete(p.out, sock)
		delete(p.gone, sock)
	}
	if err != nil && !whole || gone || len(p.idle[sock]) >= maxIdlePerInstance {
		c.Close()
		return
	}
	if p.idle == nil {
		p.idle = map[string][]*wire.Conn{}
	}
	p.idle[sock] = append(p.idle[sock], c)
}

// drop closes the idle connections to sock, and those out now once they are put back: its
// instance is gone.
func (p *instancePool) drop(sock string) {
	p.mu.Lock()
	l := p.idle[sock]
	delete(p.idle, sock)
	if p.out[sock] > 0 {
		p.gone[sock] = true
	}
	p.mu.Unlock()
	for _, c := range l {
		c.Close()
	}
}

// idleAndOpen reports whether the instance daemon has neither closed c nor sent anything on it
// unasked (which would put the next reply out of step).
func idleAndOpen(c *wire.Conn) bool {
	sc, ok := c.Stream.(syscall.Conn)
	if !ok || c.Buffered() > 0 {
		return false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	open := false
	_ = raw.Read(func(fd uintptr) bool {
		var b [1]byte
		_, _, err := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		open = err == unix.EAGAIN
		return true
	})
	return open
}

// callTimeout bounds a relayed request, so that an instance daemon that stopped answering (a
// tenant can stop its own: kill -STOP $PPID) holds up no request of anyone else. A start may run
// through an Allox session's sandbox, and a forced clean waits for the killed program to end:
// they get longer.
var callTimeout = map[string]time.Duration{"": 5 * time.Second, "start": 60 * time.Second, "clean": 30 * time.Second}

func timeoutOf(op string) time.Duration {
	if d, ok := callTimeout[op]; ok {
		return d
	}
	return callTimeout[""]
}

// call forwards one request to an instance daemon.
func (d *Daemon) call(sock, op string, args, out any) error {
	conn, err := d.pool.get(sock)
	if err != nil {
		return err
	}
	limit := timeoutOf(op)
	_ = conn.SetDeadline(time.Now().Add(limit))
	err = conn.Call(op, args, out)
	return d.callDone(sock, op, limit, conn, err)
}

// callRaw forwards one request to an instance daemon and returns its reply line unparsed.
func (d *Daemon) callRaw(sock, op string, args any) ([]byte, error) {
	conn, err := d.pool.get(sock)
	if err != nil {
		return nil, err
	}
	limit := timeoutOf(op)
	_ = conn.SetDeadline(time.Now().Add(limit))
	line, err := conn.CallRaw(op, args)
	return line, d.callDone(sock, op, limit, conn, err)
}

// callDone puts conn back (a timed-out one is closed: its reply may still come) and says what a
// missed deadline means.
func (d *Daemon) callDone(sock, op string, limit time.Duration, conn *wire.Conn, err error) error {
	if err == nil || !errors.Is(err, os.ErrDeadlineExceeded) {
		_ = conn.SetDeadline(time.Time{})
		d.pool.put(sock, conn, err)
		return err
	}
	d.pool.put(sock, conn, err)
	return wire.Errorf(wire.CodeGone, "instance", "the instance daemon did not answer %s within %s: it is stopped or overloaded; the host can clean its instance", op, limit)
}
