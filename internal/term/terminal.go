// Package term is one terminal, Kuruwa's and the Probe's fallback terminal's: a process on a PTY,
// one reader per PTY feeding a server-side emulator (the screen), a bounded ring of output
// addressed by sequence offsets (for tail), an append-only raw transcript, and the exit status
// kept after the process exits. The process is a local program on a PTY of its own (Start) or any
// Process, such as a run on a terminal of the workspace daemon's (Attach).
package term

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"
)

// Spec says what a terminal runs.
type Spec struct {
	Argv       []string
	Dir        string
	Env        []string
	Cols, Rows int
	// RingBytes bounds the tail ring; ScrollbackLines bounds the emulator's history.
	RingBytes       int
	ScrollbackLines int
	// DieWithParent has the kernel kill the program (SIGKILL) when the process that started it
	// dies, however it dies (PR_SET_PDEATHSIG): a parent killed or crashed leaves no program
	// running behind it, even one that ignores the hangup. It covers the program itself, not
	// what it started, and the program can undo it (prctl) or lose it by exec'ing a set-user-ID
	// program, so a parent's parent still has to end what is left.
	DieWithParent bool
}

// Status is a terminal's state as the CLI reports it.
type Status struct {
	Running  bool
	PID      int
	ExitCode int
	Signal   string
	Offset   uint64
}

// Process is a terminal's program together with its side of the terminal.
type Process interface {
	// Read is the terminal's output; it fails (EOF, EIO) once nothing holds the terminal.
	Read(p []byte) (int, error)
	// Write is input to the terminal.
	Write(p []byte) (int, error)
	Resize(cols, rows int) error
	Signal(sig syscall.Signal) error
	// Wait blocks until the program has exited: its exit code (128+n for a signal) and signal.
	Wait() (code int, signal string)
	Pid() int
	// Close ends the terminal's output side, so that Read ends.
	Close() error
}

// Terminal is a running or exited program on a terminal.
type Terminal struct {
	proc       Process
	screen     *Screen
	ring       *Ring
	transcript *os.File

	writeMu sync.Mutex // serialises input so a paste and its keys never interleave with another send
	outMu   sync.Mutex // held while one chunk of output reaches both the screen and the ring
	// sizeMu is held while a resize reaches both the PTY and the emulator: two resizes that
	// interleaved could leave the PTY at one's size and the emulator at the other's, and the
	// program would draw for a screen the emulator does not have.
	sizeMu sync.Mutex

	mu      sync.Mutex
	exited  bool
	code    int
	signal  string
	reaped  chan struct{} // closed when the process has exited
	done    chan struct{} // closed when the process has exited and its output is drained
	outDone chan struct{}
}

// The kernel sends the parent-death signal when the thread that forked the child exits, not
// when its process does, and the Go runtime ends a thread whose goroutine exits while locked to
// it. So programs that die with their parent are forked from one goroutine locked to its thread
// for the rest of the process: that thread exits only with the process.
var lasting struct {
	once sync.Once
	run  chan func()
}

func onLastingThread(f func()) {
	lasting.once.Do(func() {
		lasting.run = make(chan func())
		go func() {
			runtime.LockOSThread() // never unlocked
			for f := range lasting.run {
				f()
			}
		}()
	})
	done := make(chan struct{})
	lasting.run <- func() { defer close(done); f() }
	<-done
}

// Start runs spec on a new PTY and appends its raw output to transcript (which Start owns).
func Start(spec Spec, transcript *os.File) (*Terminal, error) {
	if len(spec.Argv) == 0 {
		return nil, errors.New("command: empty; name a program to run")
	}
	cmd := exec.Command(spec.Argv[0], spec.Argv[1:]...)
	cmd.Dir, cmd.Env = spec.Dir, spec.Env
	var ptm *os.File
	var err error
	start := func() {
		ptm, err = pty.StartWithSize(cmd, &pty.Winsize{Cols: uint16(spec.Cols), Rows: uint16(spec.Rows)})
	}
	if spec.DieWithParent {
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		onLastingThread(start)
	} else {
		start()
	}
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", spec.Argv[0], err)
	}
	return Attach(spec, &ptyProcess{ptm: ptm, cmd: cmd}, transcript), nil
}

// Attach makes a terminal of a started process: spec's size, ring and scrollback (its Argv, Dir
// and Env are the process's business). The terminal owns proc and transcript.
func Attach(spec Spec, proc Process, transcript *os.File) *Terminal {
	t := &Terminal{
		proc: proc, transcript: transcript,
		ring: NewRing(spec.RingBytes), done: make(chan struct{}), outDone: make(chan struct{}), reaped: make(chan struct{}),
	}
	t.screen = NewScreen(spec.Cols, spec.Rows, spec.ScrollbackLines, func(b []byte) { _, _ = t.write(b) })
	go t.readOutput()
	go t.wait()
	return t
}

// readOutput is the one reader of the PTY.
func (t *Terminal) readOutput() {
	defer close(t.outDone)
	buf := make([]byte, 32*1024)
	for {
		n, err := t.proc.Read(buf)
		if n > 0 {
			p := buf[:n]
			t.outMu.Lock()
			t.screen.Write(p)
			t.ring.Write(p)
			t.outMu.Unlock()
			if t.transcript != nil {
				_, _ = t.transcript.Write(p)
			}
		}
		if err != nil {
			t.screen.Close()
			if t.transcript != nil {
				_ = t.transcript.Close()
			}
			return
		}
	}
}

func (t *Terminal) wait() {
	code, sig := t.proc.Wait()
	// Background children may keep the PTY open; output already written is drained, and the
	// PTY is closed so the reader ends.
	t.mu.Lock()
	t.exited, t.code, t.signal = true, code, sig
	t.mu.Unlock()
	close(t.reaped)
	drainAndClose(t)
}

// drainAndClose waits a moment for the output still in the PTY, then ends the terminal's
// output; the reader goroutine itself ends when the last holder of the PTY's other side does.
func drainAndClose(t *Terminal) {
	timer := time.NewTimer(drainGrace)
	defer timer.Stop()
	select {
	case <-t.outDone:
	case <-timer.C:
	}
	t.ring.Close()
	close(t.done)
	// A background job may hold the PTY's other side open past the grace; the PTY is closed
	// once it lets go too and the reader ends, rather than its descriptor being left to the
	// garbage collector.
	<-t.outDone
	_ = t.proc.Close()
}

// Done is closed once the process exited and its output was consumed.
func (t *Terminal) Done() <-chan struct{} { return t.done }

// Exited is closed once the process exited, before its output is drained: what it started may
// hold the terminal open for a while after (Done waits for that, up to a grace).
func (t *Terminal) Exited() <-chan struct{} { return t.reaped }

// Status reports whether the program runs, and its exit status once it exited.
func (t *Terminal) Status() Status {
	t.mu.Lock()
	defer t.mu.Unlock()
	return Status{Running: !t.exited, PID: t.proc.Pid(), ExitCode: t.code, Signal: t.signal, Offset: t.ring.End()}
}

// Write sends input bytes to the program.
func (t *Terminal) Write(p []byte) (int, error) {
	t.writeMu.Lock()
	defer t.writeMu.Unlock()
	return t.write(p)
}

// Lock holds input for a sequence of writes (a paste, a settle delay, its keys).
func (t *Terminal) Lock()   { t.writeMu.Lock() }
func (t *Terminal) Unlock() { t.writeMu.Unlock() }

// WriteLocked writes while the caller holds Lock.
func (t *Terminal) WriteLocked(p []byte) (int, error) { return t.write(p) }

func (t *Terminal) write(p []byte) (int, error) {
	select {
	case <-t.done:
		return 0, ErrExited
	default:
	}
	n, err := t.proc.Write(p)
	if err != nil {
		return n, fmt.Errorf("write to terminal: %w", err)
	}
	return n, nil
}

// drainGrace is how long output still buffered in the PTY may take to arrive after the program
// exited before its output is declared complete (background children can hold the PTY open).
const drainGrace = 200 * time.Millisecond

// ErrExited is returned for input to a terminal whose program has exited.
var ErrExited = errors.New("the terminal's program has exited")

// Resize changes the PTY's and the emulator's size.
func (t *Terminal) Resize(cols, rows int) error {
	if cols <= 0 || rows <= 0 || cols > 1000 || rows > 1000 {
		return fmt.Errorf("size %dx%d: columns and rows must be between 1 and 1000", cols, rows)
	}
	t.sizeMu.Lock()
	defer t.sizeMu.Unlock()
	if err := t.proc.Resize(cols, rows); err != nil && !t.Status().Running {
		return ErrExited
	} else if err != nil {
		return fmt.Errorf("resize: %w", err)
	}
	t.screen.Resize(cols, rows)
	return nil
}

// Signal sends sig to the terminal's process group.
func (t *Terminal) Signal(sig syscall.Signal) error {
	if !t.Status().Running {
		return ErrExited
	}
	if err := t.proc.Signal(sig); err != nil {
		return fmt.Errorf("signal %s: %w", sig, err)
	}
	return nil
}

// SnapshotAt renders the screen together with the ring offset it reflects, so an attaching
// client draws it and then follows the ring from that offset with nothing lost or repeated.
func (t *Terminal) SnapshotAt() (Snapshot, uint64) {
	t.outMu.Lock()
	defer t.outMu.Unlock()
	return t.screen.Snapshot(), t.ring.End()
}

// Screen returns the terminal's emulator.
func (t *Terminal) Screen() *Screen { return t.screen }

// Ring returns the terminal's tail ring.
func (t *Terminal) Ring() *Ring { return t.ring }

// Bracketed reports whether the program asked for bracketed paste.
func (t *Terminal) Bracketed() bool { return t.screen.Snapshot().Bracketed }

var _ io.Writer = (*Terminal)(nil)

// ptyProcess is a local program on a PTY of its own.
type ptyProcess struct {
	ptm *os.File
	cmd *exec.Cmd
}

func (p *ptyProcess) Read(b []byte) (int, error)  { return p.ptm.Read(b) }
func (p *ptyProcess) Write(b []byte) (int, error) { return p.ptm.Write(b) }
func (p *ptyProcess) Close() error                { return p.ptm.Close() }
func (p *ptyProcess) Pid() int                    { return p.cmd.Process.Pid }

func (p *ptyProcess) Resize(cols, rows int) error {
	return pty.Setsize(p.ptm, &pty.Winsize{Cols: uint16(cols), Rows: uint16(rows)})
}

// Signal signals the program's process group.
func (p *ptyProcess) Signal(sig syscall.Signal) error { return syscall.Kill(-p.cmd.Process.Pid, sig) }

func (p *ptyProcess) Wait() (int, string) {
	err := p.cmd.Wait()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal()), ws.Signal().String()
		}
		return ee.ExitCode(), ""
	case err != nil:
		return -1, ""
	}
	return 0, ""
}
