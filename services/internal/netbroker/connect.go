package netbroker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// Tunnel is a connect relay's destination connection, dialled and not yet relaying. Exactly one
// of Relay or Close must be called; either writes its audit record.
type Tunnel struct {
	s     *session
	conn  net.Conn
	rec   Record
	start time.Time
	once  sync.Once
}

// Dial checks the policy for host:port on behalf of the run of agent's session, takes one of
// the session's connection slots and connects. The errors wrap ErrDenied (a *DeniedError with
// the rule), ErrLimit, ErrClosed, or the resolver's or dialler's error; each is audited.
// The session-socket handler reports the error to the client, or tells it the tunnel is up and
// calls Relay with its stream.
func (b *Broker) Dial(ctx context.Context, agent, session, run, host string, port uint16) (*Tunnel, error) {
	start := time.Now()
	s, err := b.session(agent, session)
	if err != nil {
		return nil, err
	}
	rec := s.newRecord(KindConnect, KindConnect, host, port)
	rec.RunID = run
	fail := func(decision string, err error) (*Tunnel, error) {
		rec.Decision, rec.Error = decision, err.Error()
		s.finish(&rec, start)
		return nil, err
	}
	if !s.enter() {
		return fail(Failed, ErrClosed)
	}
	if !s.slots.take() {
		s.active.Done()
		return fail(Limited, fmt.Errorf("connect %s port %d: %w", host, port, ErrLimit))
	}
	release := func() { s.slots.give(); s.active.Done() }
	t, err := b.resolve(ctx, agent, session, host, port)
	rec.Rule = t.dec.Rule
	switch {
	case errors.Is(err, ErrDenied):
		release()
		return fail(Denied, err)
	case err != nil:
		release()
		return fail(Failed, fmt.Errorf("connect: %w", err))
	}
	rec.Decision = Allowed
	conn, addr, err := b.dial(ctx, t)
	if err != nil {
		release()
		return fail(Failed, err)
	}
	rec.Address = addr.String()
	if !s.track(conn) {
		conn.Close()
		release()
		return fail(Failed, ErrClosed)
	}
	return &Tunnel{s: s, conn: conn, rec: rec, start: start}, nil
}

// Relay copies between stream (the client's) and the destination until either ends, the
// session is closed, or nothing moves either way for the idle timeout; it closes both and
// records the bytes each way.
func (t *Tunnel) Relay(stream io.ReadWriteCloser) {
	t.once.Do(func() {
		if !t.s.track(stream) {
			stream.Close()
			t.conn.Close()
			t.rec.Error = ErrClosed.Error()
		} else {
			t.rec.BytesUp, t.rec.BytesDown = relay(stream, t.conn, t.s.b.limits.IdleTimeout)
		}
		t.done(stream)
	})
}

// Close gives the tunnel up without relaying.
func (t *Tunnel) Close() {
	t.once.Do(func() {
		t.conn.Close()
		t.rec.Error = "closed without relaying"
		t.done(nil)
	})
}

func (t *Tunnel) done(stream io.Closer) {
	if stream != nil {
		t.s.untrack(stream)
	}
	t.s.untrack(t.conn)
	t.s.slots.give()
	t.s.finish(&t.rec, t.start)
	t.s.active.Done()
}

// Connect is Dial then Relay: for a caller with nothing to tell the client between the two. On
// error stream is left open (the caller may report the error on it); after a successful Dial it
// is relayed and closed.
func (b *Broker) Connect(ctx context.Context, agent, session, run, host string, port uint16, stream io.ReadWriteCloser) error {
	t, err := b.Dial(ctx, agent, session, run, host, port)
	if err != nil {
		return err
	}
	t.Relay(stream)
	return nil
}
