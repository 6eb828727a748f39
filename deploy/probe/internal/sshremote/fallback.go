package sshremote

import (
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"sync"

	"golang.org/x/crypto/ssh"

	"github.com/allox-os/allox/internal/rpc"
	"github.com/allox-os/allox/internal/term"
)

// terminal_fallback: a plain terminal over the same endpoint, attached to a persistent terminal
// of the session that outlives the SSH connection. A client asks for it with a terminal and the
// environment variable FallbackEnv naming the terminal (ssh -t -o SetEnv=ALLOX_TERMINAL=main
// AGENT+SESSION@probe): the first attach starts the session's login shell on a terminal of the
// appliance (process.exec, so it is a run of the session like any other), later attaches get its
// screen as it is and follow its output; a disconnect detaches and leaves the shell running. The
// Probe keeps the run's stream, a server-side emulator of its screen and a bounded ring of its
// output (internal/term, Kuruwa's). The terminal ends when its shell exits or its run is killed (a
// rollback with kill_processes, process.kill), and every attached client gets its exit status.

// FallbackEnv names the persistent terminal a shell request attaches to.
const FallbackEnv = "ALLOX_TERMINAL"

var terminalName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// fallbackKey is one persistent terminal: agent, session, name.
type fallbackKey struct{ agent, session, name string }

// fallbacks are the server's persistent terminals.
type fallbacks struct {
	mu    sync.Mutex
	terms map[fallbackKey]*fallback
}

type fallback struct {
	t     *term.Terminal
	runID string
}

// fallbackTerminal returns the session's live terminal name, starting it when there is none (or it ended).
func (c *conn) fallbackTerminal(name string, size *rpc.ExecTerminal, env map[string]string) (*fallback, error) {
	fs := &c.s.fallbacks
	k := fallbackKey{c.agent, c.session, name}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if f, ok := fs.terms[k]; ok {
		select {
		case <-f.t.Done():
		default:
			return f, nil
		}
	}
	x, err := c.exec(context.Background(), []string{c.s.cfg.Shell, "-l"}, env, size, "") // it outlives the connection: never its agent
	if err != nil {
		return nil, err
	}
	go io.Copy(io.Discard, x.Stderr) // a terminal run has none; drained all the same
	f := &fallback{runID: x.Run.RunID, t: term.Attach(term.Spec{Cols: int(size.Cols), Rows: int(size.Rows),
		RingBytes: 1 << 20, ScrollbackLines: 2000}, term.RunProcess(x), nil)}
	if fs.terms == nil {
		fs.terms = map[fallbackKey]*fallback{}
	}
	fs.terms[k] = f
	go func() {
		<-f.t.Done()
		fs.mu.Lock()
		if fs.terms[k] == f {
			delete(fs.terms, k)
		}
		fs.mu.Unlock()
	}()
	return f, nil
}

// attachFallback serves a shell request for a persistent terminal on ch until the client
// detaches (the channel or connection closes: the terminal goes on) or the terminal ends (its
// exit status goes to the client). Window changes resize the terminal.
func (c *conn) attachFallback(ch ssh.Channel, reqs <-chan *ssh.Request, name string, size *rpc.ExecTerminal, env map[string]string, a *Activity) {
	f, err := c.fallbackTerminal(name, size, env)
	if err != nil {
		a.Error = err.Error()
		fmt.Fprintf(ch.Stderr(), "allox: %s\r\n", oneLine(err.Error()))
		return
	}
	a.RunID = f.runID
	t := f.t
	if err := t.Resize(int(size.Cols), int(size.Rows)); err != nil && !errors.Is(err, term.ErrExited) {
		a.Error = err.Error()
	}
	detached := make(chan struct{})
	go func() { // input and window changes until the client goes
		defer close(detached)
		go func() {
			for req := range reqs {
				ok := false
				if req.Type == "window-change" {
					var p struct{ Cols, Rows, Width, Height uint32 }
					if ssh.Unmarshal(req.Payload, &p) == nil {
						ok = t.Resize(int(clampSize(p.Cols)), int(clampSize(p.Rows))) == nil
					}
				}
				if req.WantReply {
					req.Reply(ok, nil)
				}
			}
		}()
		buf := make([]byte, 32<<10)
		for {
			n, err := ch.Read(buf)
			if n > 0 {
				if _, werr := t.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	snap, from := t.SnapshotAt()
	if _, err := io.WriteString(ch, snap.Render()); err != nil {
		return
	}
	for {
		data, next, changed, closed, err := t.Ring().ReadFrom(from)
		var lag *term.LaggedError
		if errors.As(err, &lag) { // this client fell behind the ring: redraw, then go on
			snap, next = t.SnapshotAt()
			data = []byte(snap.Render())
		}
		if len(data) > 0 {
			if _, err := ch.Write(data); err != nil {
				return
			}
		}
		from = next
		if closed && len(data) == 0 {
			break
		}
		select {
		case <-changed:
		case <-detached:
			return // the terminal goes on without this client
		}
	}
	<-t.Done()
	st := t.Status()
	code := st.ExitCode
	a.Exit = &code
	ch.CloseWrite()
	if st.Signal != "" {
		ch.SendRequest("exit-signal", false, ssh.Marshal(struct {
			Signal     string
			CoreDumped bool
			Message    string
			Lang       string
		}{Signal: signalName(st.Signal)}))
	} else {
		ch.SendRequest("exit-status", false, ssh.Marshal(struct{ Status uint32 }{uint32(code)}))
	}
}
