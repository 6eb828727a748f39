package rpc

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
)

// process.exec is process.start with the run attached to the caller: its params are
// process.start's without stdin, plus "terminal" (ExecTerminal) for a pseudo-terminal; the
// connection switches to a stream of frames (StreamProtocol) carrying the run's input, output,
// terminal size and final record. The run's record keeps no output (it went to the caller), and a
// caller that goes away before the run has ended kills it, as a hangup ends a login.
//
// A frame is one kind byte, the payload's length as 4 bytes big-endian (at most MaxFrame), and
// the payload.
const (
	// caller → daemon
	FrameStdin    byte = 'i' // bytes for the run's stdin (its terminal with one)
	FrameStdinEOF byte = 'e' // the run's stdin ends (with a terminal: ignored, write ^D instead)
	FrameResize   byte = 'r' // JSON ExecTerminal: the terminal's new rows and cols
	// daemon → caller
	FrameStarted byte = 'S' // JSON Run: the run as it started; always the first frame
	FrameStdout  byte = 'o' // the run's stdout (with a terminal, everything it shows)
	FrameStderr  byte = 'x' // the run's stderr (never with a terminal)
	FrameExit    byte = 'X' // JSON Run: the run's final record, after all of its output; the last frame
)

// MaxFrame is the largest payload of a process.exec frame.
const MaxFrame = 1 << 20

// ExecTerminal in process.exec params asks for a pseudo-terminal of Rows × Cols; Term, if set, is
// the run's TERM.
type ExecTerminal struct {
	Rows uint16 `json:"rows"`
	Cols uint16 `json:"cols"`
	Term string `json:"term,omitempty"`
}

// WriteFrame writes one frame in a single Write (so that writers sharing w under a lock never
// interleave).
func WriteFrame(w io.Writer, kind byte, payload []byte) error {
	if len(payload) > MaxFrame {
		return fmt.Errorf("frame of %d bytes: at most %d", len(payload), MaxFrame)
	}
	b := make([]byte, 5+len(payload))
	b[0] = kind
	binary.BigEndian.PutUint32(b[1:5], uint32(len(payload)))
	copy(b[5:], payload)
	_, err := w.Write(b)
	return err
}

// ReadFrame reads one frame; a payload beyond MaxFrame is an error (the stream is then unusable).
func ReadFrame(r io.Reader) (kind byte, payload []byte, err error) {
	var h [5]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(h[1:])
	if n > MaxFrame {
		return 0, nil, fmt.Errorf("frame %q of %d bytes: at most %d", h[0], n, MaxFrame)
	}
	payload = make([]byte, n)
	if _, err := io.ReadFull(r, payload); err != nil {
		return 0, nil, fmt.Errorf("frame %q: %w", h[0], noEOF(err))
	}
	return h[0], payload, nil
}

func noEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// Exec is the caller's side of a process.exec run. Read Stdout and Stderr (both, or the run
// stalls when one fills) until EOF, then Wait for the final record.
type Exec struct {
	// Run is the run as it started.
	Run    Run
	Stdout io.Reader
	Stderr io.Reader

	conn   io.ReadWriteCloser
	wmu    sync.Mutex
	outW   *io.PipeWriter
	errW   *io.PipeWriter
	done   chan struct{}
	final  Run
	endErr error
}

// Exec starts a run attached to this client (process.exec): params are process.start's without
// stdin, plus "terminal" (an ExecTerminal) for a pseudo-terminal. ctx bounds the start only.
func (c *Client) Exec(ctx context.Context, params any) (*Exec, error) {
	conn, err := c.Stream(ctx, ActionProcessExec, params)
	if err != nil {
		return nil, err
	}
	kind, p, err := ReadFrame(conn)
	if err == nil && kind != FrameStarted {
		err = fmt.Errorf("first frame %q, want %q", kind, FrameStarted)
	}
	e := &Exec{conn: conn, done: make(chan struct{})}
	if err == nil {
		err = json.Unmarshal(p, &e.Run)
	}
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("rpc %s: %w", ActionProcessExec, err)
	}
	var outR, errR *io.PipeReader
	outR, e.outW = io.Pipe()
	errR, e.errW = io.Pipe()
	e.Stdout, e.Stderr = outR, errR
	go e.demux()
	return e, nil
}

func (e *Exec) demux() {
	err := func() error {
		for {
			kind, p, err := ReadFrame(e.conn)
			if err != nil {
				return fmt.Errorf("the stream ended before the run's final record: %w", noEOF(err))
			}
			switch kind {
			case FrameStdout:
				e.outW.Write(p) // a reader that went away (closed pipe) drops the rest
			case FrameStderr:
				e.errW.Write(p)
			case FrameExit:
				return json.Unmarshal(p, &e.final)
			default:
				return fmt.Errorf("unexpected frame %q from the daemon", kind)
			}
		}
	}()
	e.endErr = err
	e.outW.CloseWithError(errOrEOF(err))
	e.errW.CloseWithError(errOrEOF(err))
	close(e.done)
}

func errOrEOF(err error) error {
	if err == nil {
		return io.EOF
	}
	return err
}

func (e *Exec) send(kind byte, p []byte) error {
	e.wmu.Lock()
	defer e.wmu.Unlock()
	return WriteFrame(e.conn, kind, p)
}

// Write sends p to the run's stdin (its terminal).
func (e *Exec) Write(p []byte) (int, error) {
	for off := 0; off < len(p); off += MaxFrame {
		if err := e.send(FrameStdin, p[off:min(off+MaxFrame, len(p))]); err != nil {
			return off, err
		}
	}
	return len(p), nil
}

// CloseStdin ends the run's stdin.
func (e *Exec) CloseStdin() error { return e.send(FrameStdinEOF, nil) }

// Resize sets the run's terminal to rows × cols.
func (e *Exec) Resize(rows, cols uint16) error {
	p, _ := json.Marshal(ExecTerminal{Rows: rows, Cols: cols})
	return e.send(FrameResize, p)
}

// Wait waits for the run's final record (its output has all been delivered before it).
func (e *Exec) Wait(ctx context.Context) (Run, error) {
	select {
	case <-e.done:
		return e.final, e.endErr
	case <-ctx.Done():
		return Run{}, ctx.Err()
	}
}

// Close closes the stream; a run still going is killed by the daemon.
func (e *Exec) Close() error { return e.conn.Close() }
