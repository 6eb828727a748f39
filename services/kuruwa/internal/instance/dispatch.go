package instance

import (
	"bytes"
	"encoding/json"
	"strings"
	"syscall"
	"time"

	"github.com/allox-os/allox/internal/term"
	"github.com/allox-os/allox/services/kuruwa/internal/wire"
	"golang.org/x/sys/unix"
)

// dispatch serves one request; it reports true when the request turned the connection into a
// stream that has now ended.
func (s *Server) dispatch(c *wire.Conn, req wire.Request) bool {
	switch req.Op {
	case "hello":
		_ = c.Reply(wire.Hello{Instance: s.ID, PID: unix.Getpid(), PIDNamespace: PIDNamespace()}, nil)
	case "watch":
		// The creator holds this connection for as long as it runs. When the connection ends
		// first, the creator is gone (killed, or crashed) and nothing can reach this instance
		// any more: it shuts down as if asked, ending its terminals, instead of running on
		// unreachable.
		_ = c.Reply(struct{}{}, nil)
		s.watch(c)
		s.once.Do(func() { close(s.stop) })
		return true
	case "shutdown":
		_ = c.Reply(struct{}{}, nil)
		s.once.Do(func() { close(s.stop) })
	case "start":
		reply(c, req.Args, s.start)
	case "ls":
		_ = c.Reply(s.list(), nil)
	case "status":
		reply(c, req.Args, func(a wire.TermArgs) (any, error) {
			e, err := s.lookup(a.ID)
			if err != nil {
				return nil, err
			}
			return s.info(a.ID, e), nil
		})
	case "screen":
		// A full scrollback goes after the reply's line as it is, to a client that takes it so.
		a, err := wire.Decode[wire.ScreenArgs](req.Args)
		var res wire.ScreenResult
		var history []byte
		if err == nil {
			res, history, err = s.screen(a)
		}
		switch {
		case err != nil:
			_ = c.Reply(nil, err)
		case a.Scrollback && a.Raw:
			_ = c.ReplyRaw(res, history)
		default:
			res.HistoryText = string(history) // empty without Scrollback
			_ = c.Reply(res, nil)
		}
	case "send":
		reply(c, req.Args, empty(s.send))
	case "resize":
		reply(c, req.Args, empty(s.resize))
	case "signal":
		reply(c, req.Args, empty(s.signal))
	case "clean":
		reply(c, req.Args, empty(s.clean))
	case "tail", "attach", "transcript":
		a, err := wire.Decode[wire.TailArgs](req.Args)
		var e *entry
		if err == nil {
			e, err = s.lookup(a.ID)
		}
		if err != nil {
			_ = c.Reply(nil, err)
			return false
		}
		switch req.Op {
		case "attach":
			s.attach(c, e.t)
		case "transcript":
			return s.transcript(c, a)
		default:
			_ = c.Reply(struct{}{}, nil)
			follow(c, e.t, a.From, a.Follow, clientGone(c))
		}
		return true
	default:
		_ = c.Reply(nil, wire.Errorf(wire.CodeBadRequest, "op", "%v %q", errUnknownOp, req.Op))
	}
	return false
}

// reply decodes the arguments, runs f and sends its result or error.
func reply[T, R any](c *wire.Conn, raw json.RawMessage, f func(T) (R, error)) {
	a, err := wire.Decode[T](raw)
	if err != nil {
		_ = c.Reply(nil, err)
		return
	}
	_ = c.Reply(f(a))
}

// empty adapts an operation with no result to reply.
func empty[T any](f func(T) error) func(T) (struct{}, error) {
	return func(a T) (struct{}, error) { return struct{}{}, f(a) }
}

// screen is the viewport, and with Scrollback the whole history as one text.
func (s *Server) screen(a wire.ScreenArgs) (wire.ScreenResult, []byte, error) {
	e, err := s.lookup(a.ID)
	if err != nil {
		return wire.ScreenResult{}, nil, err
	}
	res := wire.ScreenResult{Snapshot: wire.Snapshot(e.t.Screen().Snapshot())}
	var history []byte
	if a.Scrollback {
		history = e.t.Screen().ScrollbackBytes()
	}
	return res, history, nil
}

// SendKeys checks a send against the bounds every daemon applies before writing any of it, and
// returns its keys' bytes. One send holds its terminal's input, and every other send behind it,
// for as long as its keys and their settle delays take: wire.MaxSendKeys keys (more than any
// menu or editor walk needs) and wire.MaxSendSettle of settling in all (three of the longest
// single delays) bound that; a longer sequence is several sends. The main daemon checks a send
// with it before relaying the first write, so a refused send writes nothing there either.
func SendKeys(a wire.SendArgs) ([][]byte, error) {
	if len(a.Keys) > wire.MaxSendKeys {
		return nil, wire.Errorf(wire.CodeBadRequest, "keys", "%d keys: at most %d in one send; split them over several sends", len(a.Keys), wire.MaxSendKeys)
	}
	keys := make([][]byte, len(a.Keys))
	for i, k := range a.Keys {
		var err error
		if keys[i], err = term.Key(k); err != nil {
			return nil, wire.Errorf(wire.CodeBadRequest, "keys", "%v", err)
		}
	}
	if a.SettleMS < 0 || a.SettleMS > 10000 {
		return nil, wire.Errorf(wire.CodeBadRequest, "settle", "settle %dms: must be between 0 and 10000", a.SettleMS)
	}
	// Every key waits the settle delay, but the first one when there is no text before it.
	waits := len(keys)
	if a.Text == "" && waits > 0 {
		waits--
	}
	if total := time.Duration(waits) * time.Duration(a.SettleMS) * time.Millisecond; total > wire.MaxSendSettle {
		return nil, wire.Errorf(wire.CodeBadRequest, "settle", "settle %dms before each of %d keys is %v of settling: at most %v in one send; use a shorter settle or split the keys over several sends", a.SettleMS, waits, total, wire.MaxSendSettle)
	}
	return keys, nil
}

// send writes Text, as one bracketed paste when it spans lines and the program asked for
// bracketed paste, then each key as a separate write after the settle delay: agent TUIs treat
// an Enter that arrives with pasted text as part of the paste. A paste has the paste markers
// (ESC[200~, ESC[201~) removed from its text, as terminal emulators do with pasted text, so that
// no text ends the paste early and has the rest taken as typed. A request over the bounds on
// keys and settling is refused before anything is written.
func (s *Server) send(a wire.SendArgs) error {
	e, err := s.lookup(a.ID)
	if err != nil {
		return err
	}
	keys, err := SendKeys(a)
	if err != nil {
		return err
	}
	t := e.t
	t.Lock()
	defer t.Unlock()
	if a.Text != "" {
		text := []byte(a.Text)
		if strings.ContainsAny(a.Text, "\r\n") && t.Bracketed() {
			text = append(append([]byte(pasteStart), withoutPasteMarkers(text)...), pasteEnd...)
		}
		if _, err := t.WriteLocked(text); err != nil {
			return wire.Errorf(wire.CodeGone, "name", "%v", err)
		}
	}
	for i, k := range keys {
		if a.Text != "" || i > 0 {
			time.Sleep(time.Duration(a.SettleMS) * time.Millisecond)
		}
		if _, err := t.WriteLocked(k); err != nil {
			return wire.Errorf(wire.CodeGone, "name", "%v", err)
		}
	}
	return nil
}

// The markers around a bracketed paste.
const (
	pasteStart = "\x1b[200~"
	pasteEnd   = "\x1b[201~"
)

// withoutPasteMarkers is text with every paste marker removed, including those that removing
// another one joins together (ESC[20 ESC[201~ 1~): each byte is appended and a marker that the
// output then ends with is cut off again, so the output never holds one, in one pass.
func withoutPasteMarkers(text []byte) []byte {
	out := make([]byte, 0, len(text))
	for _, b := range text {
		out = append(out, b)
		if b == '~' && (bytes.HasSuffix(out, []byte(pasteStart)) || bytes.HasSuffix(out, []byte(pasteEnd))) {
			out = out[:len(out)-len(pasteEnd)]
		}
	}
	return out
}

func (s *Server) resize(a wire.ResizeArgs) error {
	e, err := s.lookup(a.ID)
	if err != nil {
		return err
	}
	if err := e.t.Resize(a.Cols, a.Rows); err != nil {
		return wire.Errorf(wire.CodeBadRequest, "cols", "%v", err)
	}
	return nil
}

var signals = map[string]syscall.Signal{
	"": syscall.SIGTERM, "TERM": syscall.SIGTERM, "INT": syscall.SIGINT, "HUP": syscall.SIGHUP,
	"KILL": syscall.SIGKILL, "QUIT": syscall.SIGQUIT, "USR1": syscall.SIGUSR1, "USR2": syscall.SIGUSR2,
}

func (s *Server) signal(a wire.SignalArgs) error {
	e, err := s.lookup(a.ID)
	if err != nil {
		return err
	}
	sig, ok := signals[strings.TrimPrefix(strings.ToUpper(a.Signal), "SIG")]
	if !ok {
		return wire.Errorf(wire.CodeBadRequest, "signal", "signal %q: use TERM, INT, HUP, KILL, QUIT, USR1 or USR2", a.Signal)
	}
	if err := e.t.Signal(sig); err != nil {
		return wire.Errorf(wire.CodeConflict, "name", "%v", err)
	}
	return nil
}

// clientGone is closed once the client of a stream that sends nothing after its request hangs
// up (or sends anything at all): a follower waiting on a quiet terminal would otherwise notice
// only at the terminal's next output, holding the connection and its goroutine until then.
func clientGone(c *wire.Conn) <-chan struct{} {
	gone := make(chan struct{})
	go func() {
		defer close(gone)
		var f wire.Frame
		_ = c.Recv(&f)
	}()
	return gone
}

// follow streams output from offset from; without follow it stops at the current end. It ends
// when gone is closed, the client having left.
func follow(c *wire.Conn, t *term.Terminal, from uint64, keep bool, gone <-chan struct{}) {
	for {
		data, next, changed, closed, err := t.Ring().ReadFrom(from)
		if err != nil {
			_ = c.Send(wire.Frame{Error: wire.Errorf(wire.CodeConflict, "from", "%v", err)})
			return
		}
		if len(data) > 0 {
			if err := c.Send(wire.Frame{Seq: from, Output: data, Next: next}); err != nil {
				return
			}
		}
		from = next
		if closed || !keep {
			if !keep && !closed {
				_ = c.Send(wire.Frame{Next: from, End: true})
				return
			}
			st := t.Status()
			_ = c.Send(wire.Frame{Next: from, End: true, Exit: &st.ExitCode})
			return
		}
		select {
		case <-changed:
		case <-gone:
			return
		}
	}
}

// attach draws the current screen, then streams output from the offset the drawing reflects
// while input and resizes flow the other way, until the client detaches or the program exits.
func (s *Server) attach(c *wire.Conn, t *term.Terminal) {
	snap, from := t.SnapshotAt()
	_ = c.Reply(struct{}{}, nil)
	if err := c.Send(wire.Frame{Seq: from, Output: []byte(snap.Render())}); err != nil {
		return
	}
	gone := make(chan struct{})
	go func() {
		defer close(gone)
		for {
			var f wire.Frame
			if err := c.Recv(&f); err != nil {
				_ = c.Close()
				return
			}
			if len(f.Input) > 0 {
				_, _ = t.Write(f.Input)
			}
			if f.Size != nil {
				_ = t.Resize(f.Size[0], f.Size[1])
			}
		}
	}()
	follow(c, t, from, true, gone)
}

func (s *Server) transcript(c *wire.Conn, a wire.TailArgs) bool {
	fd, err := unix.Openat(int(s.state.Fd()), a.ID+".transcript", unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		_ = c.Reply(nil, wire.Errorf(wire.CodeInternal, "", "open transcript: %v", err))
		return false
	}
	defer unix.Close(fd)
	_ = c.Reply(struct{}{}, nil)
	buf := make([]byte, 64*1024)
	var off uint64
	for {
		n, err := unix.Read(fd, buf)
		if n > 0 {
			if c.Send(wire.Frame{Seq: off, Output: buf[:n]}) != nil {
				return true
			}
			off += uint64(n)
		}
		if err != nil || n <= 0 {
			_ = c.Send(wire.Frame{Next: off, End: true})
			return true
		}
	}
}
