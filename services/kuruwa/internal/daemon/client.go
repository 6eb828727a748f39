package daemon

import (
	"net"
	"sync"
	"time"

	"github.com/allox-os/allox/services/kuruwa/internal/entry"
	"github.com/allox-os/allox/services/kuruwa/internal/wire"
)

// client is one connection on an entry. relied and recheck are guarded by d.mu, and cutCh is
// closed under it.
type client struct {
	tenant *tenant
	peer   entry.Peer
	conn   *wire.Conn
	sendMu sync.Mutex // one writer at a time: the handler or a revocation

	relied  map[string]bool // grant keys any of its requests used
	recheck func() error    // the check of the stream it runs, if any
	// cutCh is closed once a revocation closed it (or the daemon shuts down): it writes nothing
	// more to any terminal, and a settle delay under way ends at once.
	cutCh  chan struct{}
	writes sync.WaitGroup // its writes to a terminal under way (send.go), added to under d.mu while not cut
	once   sync.Once
}

func (c *client) send(v any) error {
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	return c.conn.Send(v)
}

func (c *client) reply(result any, err error) error {
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	return c.conn.Reply(result, err)
}

// replyLine sends a reply that is already encoded.
func (c *client) replyLine(line []byte) error {
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	return c.conn.SendLine(line)
}

func (c *client) close() { c.once.Do(func() { _ = c.conn.Close() }) }

// markCutLocked, with d.mu held, stops c's send (send.go) from writing anything more.
func (c *client) markCutLocked() {
	if !c.isCut() {
		close(c.cutCh)
	}
}

// isCut reports whether c was cut.
func (c *client) isCut() bool {
	select {
	case <-c.cutCh:
		return true
	default:
		return false
	}
}

// cutLocked, with d.mu held, closes c for the revocation of key: once drain has waited for the
// writes it had under way, none of its requests writes to a terminal again.
func (c *client) cutLocked(key string) {
	c.markCutLocked()
	c.revoked(key)
}

// drain waits for the writes to a terminal that the clients, cut, had under way; the caller has
// released d.mu. It cannot deadlock, nor could it under d.mu: a write registered is one call to
// an instance daemon, which takes no lock of the main daemon's and ends within its deadline, and
// a client's own request never waits for its own writes (it serves one request at a time, so a
// request of it that revokes runs no send). Waiting outside d.mu keeps the daemon's other
// requests from waiting up to that deadline behind a write to a terminal that does not read.
func drain(cut []*client) {
	for _, c := range cut {
		c.writes.Wait()
	}
}

// revoked closes the client's connection before returning. When no write is in flight it first
// tells the client why, without waiting more than a moment on a client that does not read.
func (c *client) revoked(key string) {
	if c.sendMu.TryLock() {
		_ = c.conn.SetWriteDeadline(time.Now().Add(20 * time.Millisecond))
		_ = c.conn.Send(wire.Frame{Error: wire.Errorf(wire.CodeRevoked, "", "the grant %s was revoked; this connection is closed", key)})
		c.sendMu.Unlock()
	}
	c.close()
}

func (d *Daemon) accept(t *tenant, ln net.Listener) {
	for {
		nc, err := wire.Accept(ln)
		if err != nil {
			return
		}
		uc := nc.(*net.UnixConn)
		peer, err := entry.PeerOf(uc)
		if err != nil {
			_ = nc.Close()
			continue
		}
		c := &client{tenant: t, peer: peer, conn: wire.NewConn(uc), relied: map[string]bool{}, cutCh: make(chan struct{})}
		d.mu.Lock()
		if d.closing {
			d.mu.Unlock()
			_ = nc.Close()
			return
		}
		d.clients[c] = struct{}{}
		d.mu.Unlock()
		d.log.Debug("connected", "tenant", t.name, "pid", peer.PID, "uid", peer.UID, "gid", peer.GID)
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			d.serve(c)
			d.mu.Lock()
			delete(d.clients, c)
			d.mu.Unlock()
			c.close()
		}()
	}
}

func (d *Daemon) serve(c *client) {
	for {
		var req wire.Request
		if err := c.conn.Recv(&req); err != nil {
			return
		}
		if stream := d.dispatch(c, req); stream {
			return
		}
	}
}
