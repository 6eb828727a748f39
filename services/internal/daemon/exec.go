package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/allox-os/allox/internal/rpc"
	"github.com/allox-os/allox/services/internal/plugin"
	"github.com/allox-os/allox/services/internal/tracked"
)

// execParams are process.exec's: process.start's (stdin is refused: it comes on the stream) and
// the terminal.
type execParams struct {
	startParams
	Terminal *rpc.ExecTerminal `json:"terminal"`
}

// claimWithin bounds the time between process.exec's start of the run and its stream's
// takeover: a connection that never switches (the 101 could not be written) leaves no run behind.
const claimWithin = 30 * time.Second

// exitGrace bounds how long the final record waits, once the run has ended, for the last of
// its output: everything that held the streams died with the run's cgroup, so it is only the
// time to drain what the kernel still buffers.
const exitGrace = 5 * time.Second

func (h workspaceHandlers) processExec(ctx context.Context, c *Call) (any, error) {
	var p execParams
	req, undo, err := h.startRequest(ctx, c, &p)
	if err != nil {
		return nil, err
	}
	var term *tracked.TermSize
	if t := p.Terminal; t != nil {
		term = &tracked.TermSize{Rows: t.Rows, Cols: t.Cols}
		if t.Term != "" {
			if _, given := req.Env["TERM"]; given {
				undo()
				return nil, rpc.Errorf(rpc.CodeInvalidParams, "params.terminal.term",
					"params.terminal.term and params.env.TERM both set the run's TERM: give it once")
			}
			req.Env = withEnv(req.Env, "TERM", t.Term)
		}
	}
	st, a, err := h.w.StartAttached(ctx, req, term)
	if err != nil {
		undo()
		return nil, err
	}
	x := &execRelay{h: h, st: st, a: a}
	x.timer = time.AfterFunc(claimWithin, func() {
		if x.claimed.CompareAndSwap(false, true) {
			x.hangUp()
		}
	})
	return plugin.Relay(x.relay), nil
}

// withEnv returns m (made if nil) with k set to v.
func withEnv(m map[string]string, k, v string) map[string]string {
	if m == nil {
		m = map[string]string{}
	}
	m[k] = v
	return m
}

// execRelay carries one attached run's streams over its caller's connection.
type execRelay struct {
	h       workspaceHandlers
	st      *tracked.Status
	a       *tracked.Attached
	claimed atomic.Bool
	timer   *time.Timer
	wmu     sync.Mutex
}

// hangUp kills the run whose caller went away and closes its streams.
func (x *execRelay) hangUp() {
	_ = x.h.w.KillRun(x.st.RunID)
	x.a.Close()
}

func (x *execRelay) send(conn io.Writer, kind byte, p []byte) error {
	x.wmu.Lock()
	defer x.wmu.Unlock()
	return rpc.WriteFrame(conn, kind, p)
}

func (x *execRelay) relay(conn io.ReadWriteCloser) error {
	if !x.claimed.CompareAndSwap(false, true) {
		conn.Close()
		return fmt.Errorf("run %s: its stream came after %s; the run was killed", x.st.RunID, claimWithin)
	}
	x.timer.Stop()
	defer conn.Close()
	started, _ := json.Marshal(run(x.st))
	if err := x.send(conn, rpc.FrameStarted, started); err != nil {
		x.hangUp()
		return err
	}
	var out sync.WaitGroup
	pump := func(r io.Reader, kind byte) {
		defer out.Done()
		buf := make([]byte, 32<<10)
		for {
			n, err := r.Read(buf)
			if n > 0 && x.send(conn, kind, buf[:n]) != nil {
				return // the caller is gone: input handles the hangup
			}
			if err != nil {
				return // EOF, or EIO once a terminal has no process left
			}
		}
	}
	out.Add(1)
	go pump(x.a.Stdout, rpc.FrameStdout)
	if x.a.Stderr != nil {
		out.Add(1)
		go pump(x.a.Stderr, rpc.FrameStderr)
	}
	ended := make(chan struct{})
	inputErr := make(chan error, 1)
	go func() { inputErr <- x.input(conn, ended) }()

	final, err := x.h.w.WaitRun(context.Background(), x.st.RunID)
	close(ended)
	drained := make(chan struct{})
	go func() { out.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(exitGrace):
	}
	x.a.Close()
	<-drained
	if err != nil {
		return fmt.Errorf("run %s: %w", x.st.RunID, err)
	}
	rec, _ := json.Marshal(run(final))
	if err := x.send(conn, rpc.FrameExit, rec); err != nil {
		return err
	}
	select {
	case err := <-inputErr:
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
	default:
	}
	return nil
}

// input applies the caller's frames to the run until the caller goes away (which, before the
// run has ended, kills it) or sends something that is not a frame of this stream.
func (x *execRelay) input(conn io.Reader, ended <-chan struct{}) error {
	for {
		kind, p, err := rpc.ReadFrame(conn)
		if err != nil {
			select {
			case <-ended:
			default:
				x.hangUp()
			}
			return err
		}
		switch kind {
		case rpc.FrameStdin:
			_, err = x.a.Stdin.Write(p)
		case rpc.FrameStdinEOF:
			err = x.a.Stdin.Close()
		case rpc.FrameResize:
			var t rpc.ExecTerminal
			if err = json.Unmarshal(p, &t); err == nil {
				err = x.a.Resize(tracked.TermSize{Rows: t.Rows, Cols: t.Cols})
			}
		default:
			x.hangUp()
			return fmt.Errorf("run %s: frame %q is not one a caller sends: the run was killed", x.st.RunID, kind)
		}
		if err != nil && kind != rpc.FrameStdin { // a stdin write fails once the run stopped reading
			x.hangUp()
			return fmt.Errorf("run %s: frame %q: %w; the run was killed", x.st.RunID, kind, err)
		}
	}
}
