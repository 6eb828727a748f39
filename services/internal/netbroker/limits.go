package netbroker

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Limits bound each session's traffic. Zero fields mean the defaults.
type Limits struct {
	MaxConns       int           // connections (requests in flight, tunnels, relays) open at once per session; 64
	ConnectTimeout time.Duration // to establish the TCP connection to the destination; 10 s
	IdleTimeout    time.Duration // a connection with no byte moving either way for this long is closed; 5 min
}

func (l Limits) withDefaults() Limits {
	if l.MaxConns <= 0 {
		l.MaxConns = 64
	}
	if l.ConnectTimeout <= 0 {
		l.ConnectTimeout = 10 * time.Second
	}
	if l.IdleTimeout <= 0 {
		l.IdleTimeout = 5 * time.Minute
	}
	return l
}

// ErrLimit is returned (wrapped) when a session already has MaxConns connections open.
var ErrLimit = errors.New("the session has too many connections open; close some or raise the broker's MaxConns")

// slots is one session's connection budget: a semaphore of its own, so that one session at its
// limit never waits on another's.
type slots chan struct{}

func (s slots) take() bool {
	select {
	case s <- struct{}{}:
		return true
	default:
		return false
	}
}

func (s slots) give() { <-s }

// relay copies a to b and b to a until either side ends or nothing moves for idle, then closes
// both. up counts a→b, down b→a. Between two TCP sockets the kernel moves the bytes (splice)
// and the watchdog reads progress from the sockets' counters.
func relay(a io.ReadWriteCloser, b io.ReadWriteCloser, idle time.Duration) (up, down int64) {
	ta, tb := tcpOf(a), tcpOf(b)
	var progress func() uint64
	if ta != nil && tb != nil {
		progress = func() uint64 { return tcpBytes(ta) + tcpBytes(tb) }
	}
	w := newWatchdog(idle, progress, func() { a.Close(); b.Close() })
	cp := func(dst io.Writer, src io.Reader) int64 { return copyActive(dst, src, w) }
	if progress != nil {
		cp = func(dst io.Writer, src io.Reader) int64 {
			n, _ := io.Copy(dst.(*net.TCPConn), src.(*net.TCPConn))
			return n
		}
		a, b = ta, tb
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		up = cp(b, a)
		closeWrite(b)
	}()
	go func() {
		defer wg.Done()
		down = cp(a, b)
		closeWrite(a)
	}()
	wg.Wait()
	w.stop()
	a.Close()
	b.Close()
	return up, down
}

// closeWrite half-closes c when it can (so a client's EOF reaches the destination), else closes it.
func closeWrite(c io.Closer) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
		return
	}
	c.Close()
}

func copyActive(dst io.Writer, src io.Reader, w *watchdog) int64 {
	buf := make([]byte, 32<<10)
	var n int64
	for {
		r, err := src.Read(buf)
		if r > 0 {
			w.touch()
			m, werr := dst.Write(buf[:r])
			n += int64(m)
			w.touch()
			if werr != nil {
				return n
			}
		}
		if err != nil {
			return n
		}
	}
}

// tcpOf is the TCP socket below c, when c is one with nothing buffered above it.
func tcpOf(c io.ReadWriteCloser) *net.TCPConn {
	for {
		switch v := c.(type) {
		case *net.TCPConn:
			return v
		case bufferedConn:
			if v.r.Buffered() > 0 {
				return nil
			}
			c = v.Conn
		case interface{ NetConn() net.Conn }:
			c = v.NetConn()
		default:
			return nil
		}
	}
}

// tcpBytes is what c has received and had acknowledged so far, by the kernel's count.
func tcpBytes(c *net.TCPConn) uint64 {
	var n uint64
	if rc, err := c.SyscallConn(); err == nil {
		rc.Control(func(fd uintptr) {
			if ti, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO); err == nil {
				n = ti.Bytes_received + ti.Bytes_acked
			}
		})
	}
	return n
}

// watchdog calls fire once when touch has not been called, and progress (when set) has not
// changed, for idle.
type watchdog struct {
	idle     time.Duration
	last     atomic.Int64 // unix nanoseconds of the last activity
	timer    *time.Timer
	fire     func()
	done     atomic.Bool
	progress func() uint64
	seen     uint64 // progress at the last check; only check uses it
}

func newWatchdog(idle time.Duration, progress func() uint64, fire func()) *watchdog {
	w := &watchdog{idle: idle, fire: fire, progress: progress}
	w.touch()
	w.timer = time.AfterFunc(idle, w.check)
	return w
}

func (w *watchdog) touch() { w.last.Store(time.Now().UnixNano()) }

func (w *watchdog) check() {
	if w.done.Load() {
		return
	}
	if w.progress != nil {
		if p := w.progress(); p != w.seen {
			w.seen = p
			w.touch()
		}
	}
	left := w.idle - time.Since(time.Unix(0, w.last.Load()))
	if left > 0 {
		w.timer.Reset(left)
		return
	}
	w.done.Store(true)
	w.fire()
}

func (w *watchdog) stop() {
	w.done.Store(true)
	w.timer.Stop()
}

// idleConn is a destination connection of the HTTP proxy: every read and write must make
// progress within idle. Deadlines are moved at most every idle/16, not on every call.
type idleConn struct {
	net.Conn
	idle        time.Duration
	read, write deadline
}

func (c *idleConn) Read(p []byte) (int, error) {
	c.read.extend(c.Conn.SetReadDeadline, c.idle)
	return c.Conn.Read(p)
}

func (c *idleConn) Write(p []byte) (int, error) {
	c.write.extend(c.Conn.SetWriteDeadline, c.idle)
	return c.Conn.Write(p)
}

// deadline moves a connection's deadline to now+idle when it was last moved more than idle/16
// ago: the deadline always lies between idle×15/16 and idle ahead. One goroutine uses it.
type deadline struct{ set time.Time }

func (d *deadline) extend(set func(time.Time) error, idle time.Duration) {
	now := time.Now()
	if now.Sub(d.set) < idle/16 {
		return
	}
	d.set = now
	set(now.Add(idle))
}

// limitListener accepts at most n connections at once; the others wait in the backlog.
// Unlike x/net's netutil.LimitListener, its connections give their socket back (NetConn), so
// that a CONNECT tunnel can splice.
type limitListener struct {
	net.Listener
	sem chan struct{}
}

func (l *limitListener) Accept() (net.Conn, error) {
	l.sem <- struct{}{}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	return &limitedConn{Conn: c, release: func() { <-l.sem }}, nil
}

type limitedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

func (c *limitedConn) NetConn() net.Conn { return c.Conn }
