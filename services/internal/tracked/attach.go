package tracked

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/creack/pty"
)

// TermSize is a terminal's size in character cells.
type TermSize struct{ Rows, Cols uint16 }

// Attached is the caller's end of an attached run's standard streams (StartAttached). The run's
// record keeps no output: it went to the caller.
type Attached struct {
	// Stdin is the run's standard input. Closing it is the run's EOF; with a terminal, which has
	// no EOF of its own (a shell reads ^D, which the caller writes), it only stops the writes.
	Stdin io.WriteCloser
	// Stdout is the run's standard output, with a terminal everything the terminal shows (stdout
	// and stderr together). Reads end (io.EOF, or EIO for a terminal) once no process of the run
	// holds the stream any more: at the latest when the run has ended.
	Stdout io.Reader
	// Stderr is the run's standard error; nil with a terminal.
	Stderr io.Reader

	term  *os.File   // the terminal's master; nil without a terminal
	files []*os.File // every caller-side descriptor
}

// Resize sets the terminal's size; the run's foreground process group gets SIGWINCH.
func (a *Attached) Resize(sz TermSize) error {
	if a.term == nil {
		return errors.New("the run has no terminal to resize")
	}
	if sz.Rows == 0 || sz.Cols == 0 {
		return invalid("terminal", "a size of %d rows × %d columns: both must be at least 1", sz.Rows, sz.Cols)
	}
	return pty.Setsize(a.term, &pty.Winsize{Rows: sz.Rows, Cols: sz.Cols})
}

// Close closes the caller's ends of the streams. The run goes on (a caller that wants it ended
// kills it); its writes to a closed stream fail (EPIPE) or, for a terminal, are discarded.
func (a *Attached) Close() error {
	var errs []error
	for _, f := range a.files {
		errs = append(errs, f.Close())
	}
	return errors.Join(errs...)
}

// attachment is an attached request's streams while its run starts: the child's ends (closed in
// the parent once the launcher has them) and the caller's.
type attachment struct {
	term   *TermSize
	child  []*os.File // stdin, stdout, stderr of the launcher
	caller *Attached
}

// open makes the streams: a pseudo-terminal of the requested size, or three pipes.
func (a *attachment) open() error {
	if a.term != nil {
		master, slave, err := pty.Open()
		if err != nil {
			return fmt.Errorf("terminal: %w", err)
		}
		if err := pty.Setsize(master, &pty.Winsize{Rows: a.term.Rows, Cols: a.term.Cols}); err != nil {
			master.Close()
			slave.Close()
			return fmt.Errorf("terminal size: %w", err)
		}
		a.child = []*os.File{slave, slave, slave}
		a.caller = &Attached{Stdin: termInput{master}, Stdout: master, term: master, files: []*os.File{master}}
		return nil
	}
	var ends [3][2]*os.File // [i][0] read end, [i][1] write end
	for i := range ends {
		r, w, err := os.Pipe()
		if err != nil {
			for _, e := range ends[:i] {
				e[0].Close()
				e[1].Close()
			}
			return fmt.Errorf("stdio pipes: %w", err)
		}
		ends[i] = [2]*os.File{r, w}
	}
	a.child = []*os.File{ends[0][0], ends[1][1], ends[2][1]}
	a.caller = &Attached{Stdin: ends[0][1], Stdout: ends[1][0], Stderr: ends[2][0],
		files: []*os.File{ends[0][1], ends[1][0], ends[2][0]}}
	return nil
}

// closeChild closes the parent's copies of the child's ends (the terminal's slave once).
func (a *attachment) closeChild() {
	seen := map[*os.File]bool{}
	for _, f := range a.child {
		if !seen[f] {
			seen[f] = true
			f.Close()
		}
	}
}

// setsidPath starts a terminal run's command inside the sandbox (see StartAttached).
const setsidPath = "/usr/bin/setsid"

// argv is the command a sandbox starts for argv: the same, or with a terminal, started by setsid
// -c, which makes a session controlling the terminal and execs argv (the same process: its exit
// status is the run's).
func (a *attachment) argv(argv []string) []string {
	if a == nil || a.term == nil {
		return argv
	}
	return append([]string{setsidPath, "-c"}, argv...)
}

// termInput writes to a terminal's master; Close leaves the master (the terminal's output) open.
type termInput struct{ f *os.File }

func (t termInput) Write(p []byte) (int, error) { return t.f.Write(p) }
func (termInput) Close() error                  { return nil }

// StartAttached starts req like Start, with its standard streams given to the caller instead of
// req.Stdin and the record's output files: a pseudo-terminal of size term (the run's stdin,
// stdout, stderr and controlling terminal), or three pipes when term is nil. The run is
// supervised, limited, recorded and ended exactly like any other; the caller closes a.
//
// With a terminal, the sandbox's command is started by setsid -c (util-linux's, or busybox's in
// the guest: both take -c): a new session inside the sandbox's PID namespace whose controlling
// terminal is the run's own, so that a shell's job control works and hands the terminal back to
// a process group it can see when it exits (with the terminal controlled from outside the
// namespace an interactive dash cannot, and exits 2). bwrap then does not make the session
// itself (--new-session): setsid must find its process not leading a process group, or it forks
// and busybox's returns at once. The session is still new before the command runs — setsid, a
// trusted program, makes it first — so nothing in the sandbox ever holds the daemon's own
// controlling terminal (--new-session's reason: TIOCSTI into the caller's terminal), and its
// descriptors are the run's terminal alone. A managed run's launcher is made that session leader
// directly.
func (m *Manager) StartAttached(ctx context.Context, req StartRequest, term *TermSize) (*Status, *Attached, error) {
	if len(req.Stdin) > 0 {
		return nil, nil, invalid("stdin", "an attached run reads its stdin from the caller's stream: leave stdin out and write it there")
	}
	if term != nil && (term.Rows == 0 || term.Cols == 0) {
		return nil, nil, invalid("terminal", "a size of %d rows × %d columns: both must be at least 1", term.Rows, term.Cols)
	}
	if term != nil && !req.Managed {
		if _, err := os.Stat(setsidPath); err != nil {
			return nil, nil, fmt.Errorf("%w: a terminal run starts its command with %s (util-linux or busybox): %w", ErrSandbox, setsidPath, err)
		}
	}
	req.attach = &attachment{term: term}
	st, err := m.Start(ctx, req)
	if err != nil {
		if req.attach.caller != nil {
			req.attach.caller.Close()
		}
		return nil, nil, err
	}
	return st, req.attach.caller, nil
}
