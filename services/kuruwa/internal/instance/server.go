package instance

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/allox-os/allox/internal/term"
	"github.com/allox-os/allox/services/kuruwa/internal/wire"
	"golang.org/x/sys/unix"
)

// At shutdown a terminal gets hangupGrace after SIGHUP before SIGKILL, and a killed one reapWait
// to be reaped; together they stay under the 3 s the main daemon waits for an instance daemon
// to exit before it kills it, which would leave the terminals (each in its own session) behind.
const (
	hangupGrace = time.Second
	reapWait    = time.Second
)

// Server serves one instance's terminals on the adopted listener.
type Server struct {
	ID    string
	state *os.File
	env   []string

	// Session, when set, makes every terminal a run of that Allox session (SessionSpawner).
	Session *SessionSpawner

	// spawn, when set, starts a terminal in place of Session or term.Start (tests hold a start
	// part-way through it).
	spawn func(term.Spec, *os.File) (*term.Terminal, error)

	mu       sync.Mutex
	terms    map[string]*entry // by terminal id
	starting map[string]bool   // ids of starts under way, which hold s.mu only to reserve and insert
	closing  bool              // set by killAll: a start that ends after it is undone
	stop     chan struct{}
	once     sync.Once

	watchMu  sync.Mutex
	watchers map[*wire.Conn]bool // the creator's watch connections, told of every exit
}

type entry struct {
	name string
	t    *term.Terminal
}

// NewServer serves instance id with transcripts under state.
func NewServer(id string, state *os.File) *Server {
	env := []string{"TERM=xterm-256color"}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TERM=") {
			env = append(env, kv)
		}
	}
	return &Server{ID: id, state: state, env: env, terms: map[string]*entry{}, starting: map[string]bool{}, stop: make(chan struct{}), watchers: map[*wire.Conn]bool{}}
}

// Serve accepts connections until ctx ends or a shutdown request arrives, then ends every
// terminal's process group.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	go func() {
		select {
		case <-ctx.Done():
		case <-s.stop:
		}
		_ = ln.Close()
	}()
	for {
		c, err := wire.Accept(ln)
		if err != nil {
			s.killAll()
			select {
			case <-ctx.Done():
				return nil
			case <-s.stop:
				return nil
			default:
				return err
			}
		}
		go s.handle(wire.NewConn(c))
	}
}

func (s *Server) handle(c *wire.Conn) {
	defer c.Close()
	for {
		var req wire.Request
		if err := c.Recv(&req); err != nil {
			return
		}
		if stream := s.dispatch(c, req); stream {
			return
		}
	}
}

// killAll ends every terminal: SIGHUP, a grace, then SIGKILL, to the process groups this
// daemon started and nothing else. It returns once each terminal's program is reaped (or after
// reapWait, for a program the kernel cannot end at once): this daemon is their parent, and a
// program still running or unreaped when it exits would outlive it, inherited by whoever reaps
// orphans. A start still under way ends its terminal itself (start), or, should this daemon
// exit first, its program dies with it (term.Spec.DieWithParent; a session's run, with its
// stream).
func (s *Server) killAll() {
	s.mu.Lock()
	s.closing = true
	var ts []*term.Terminal
	for _, e := range s.terms {
		ts = append(ts, e.t)
	}
	s.mu.Unlock()
	for _, t := range ts {
		_ = t.Signal(syscall.SIGHUP)
	}
	// One deadline for all of them: once it passed, every terminal still running is killed at
	// once, not each after a grace of its own.
	grace, cancel := context.WithTimeout(context.Background(), hangupGrace)
	defer cancel()
	kill(unfinished(grace, ts))
}

// kill sends SIGKILL to the terminals' process groups and waits up to reapWait for them all to
// be reaped.
func kill(ts []*term.Terminal) {
	for _, t := range ts {
		_ = t.Signal(syscall.SIGKILL)
	}
	reaped, cancel := context.WithTimeout(context.Background(), reapWait)
	defer cancel()
	unfinished(reaped, ts)
}

// unfinished waits for each terminal in turn until ctx ends, and returns those not done by then.
func unfinished(ctx context.Context, ts []*term.Terminal) []*term.Terminal {
	var late []*term.Terminal
	for _, t := range ts {
		select {
		case <-t.Done():
		case <-ctx.Done():
			late = append(late, t)
		}
	}
	return late
}

func (s *Server) lookup(id string) (*entry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.terms[id]
	if !ok {
		return nil, wire.Errorf(wire.CodeNotFound, "id", "no terminal %q in instance %s", id, s.ID)
	}
	return e, nil
}

func (s *Server) start(a wire.StartArgs) (wire.TermInfo, error) {
	if a.ID == "" || strings.ContainsAny(a.ID, "/\x00") {
		return wire.TermInfo{}, wire.Errorf(wire.CodeBadRequest, "id", "terminal id %q is not valid", a.ID)
	}
	argv := a.Argv
	if len(argv) == 0 {
		sh := os.Getenv("SHELL")
		if sh == "" || s.Session != nil {
			sh = "/bin/sh" // a session's sandbox has its own userland
		}
		argv = []string{sh}
	}
	cols, rows := a.Cols, a.Rows
	if cols == 0 {
		cols = 80
	}
	if rows == 0 {
		rows = 24
	}
	if cols < 1 || rows < 1 || cols > 1000 || rows > 1000 {
		return wire.TermInfo{}, wire.Errorf(wire.CodeBadRequest, "cols", "size %dx%d: columns and rows must be between 1 and 1000", cols, rows)
	}
	// The id is reserved under s.mu, and the program started without it: a start of a session's
	// terminal waits on the workspace daemon, up to its 30 s timeout, and every request to this
	// instance, and its shutdown, would wait with it.
	s.mu.Lock()
	switch {
	case s.closing:
		s.mu.Unlock()
		return wire.TermInfo{}, errShuttingDown(a.ID)
	case s.terms[a.ID] != nil || s.starting[a.ID]:
		s.mu.Unlock()
		return wire.TermInfo{}, wire.Errorf(wire.CodeConflict, "id", "terminal %s exists", a.ID)
	}
	s.starting[a.ID] = true
	s.mu.Unlock()
	t, err := s.spawnTerminal(a, argv, cols, rows)
	s.mu.Lock()
	delete(s.starting, a.ID)
	if err != nil {
		s.mu.Unlock()
		return wire.TermInfo{}, err
	}
	if s.closing {
		// killAll took its list of terminals before this one was in it.
		s.mu.Unlock()
		kill([]*term.Terminal{t})
		_ = unix.Unlinkat(int(s.state.Fd()), a.ID+".transcript", 0)
		return wire.TermInfo{}, errShuttingDown(a.ID)
	}
	e := &entry{name: a.Name, t: t}
	s.terms[a.ID] = e
	s.mu.Unlock()
	go func() {
		<-t.Exited()
		s.tellWatchers(wire.Exited{ID: a.ID})
	}()
	return s.info(a.ID, e), nil
}

func errShuttingDown(id string) error {
	return wire.Errorf(wire.CodeConflict, "", "terminal %s: the instance is shutting down; start it in a running instance", id)
}

// spawnTerminal creates the transcript of terminal a.ID and starts its program; when that fails
// it leaves no transcript behind.
func (s *Server) spawnTerminal(a wire.StartArgs, argv []string, cols, rows int) (*term.Terminal, error) {
	fd, err := unix.Openat(int(s.state.Fd()), a.ID+".transcript", unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_APPEND|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, wire.Errorf(wire.CodeInternal, "", "create transcript: %v", err)
	}
	base := s.env
	if s.Session != nil {
		base = nil // the session's runs have the sandbox's environment, not this daemon's
	}
	env := append(append([]string{}, base...), "KURUWA_TERMINAL="+a.Name)
	env = append(env, a.Env...)
	spec := term.Spec{
		Argv: argv, Dir: a.Dir, Env: env, Cols: cols, Rows: rows,
		RingBytes: 1 << 20, ScrollbackLines: 10000,
		// If this daemon dies instead of ending its terminals, its programs die with it; the
		// main daemon kills what is left of their process groups (daemon/orphans.go).
		DieWithParent: true,
	}
	transcript := os.NewFile(uintptr(fd), a.ID+".transcript")
	spawn := term.Start
	switch {
	case s.spawn != nil:
		spawn = s.spawn
	case s.Session != nil:
		spawn = s.Session.Start
	}
	t, err := spawn(spec, transcript)
	if err != nil {
		// Through the *os.File, whose finalizer would otherwise close fd again, by then
		// perhaps another file's.
		_ = transcript.Close()
		_ = unix.Unlinkat(int(s.state.Fd()), a.ID+".transcript", 0)
		return nil, wire.Errorf(wire.CodeBadRequest, "argv", "%v", err)
	}
	return t, nil
}

// PIDNamespace is the inode of this process's pid namespace, 0 if it cannot be read.
func PIDNamespace() uint64 {
	var st unix.Stat_t
	if unix.Stat("/proc/self/ns/pid", &st) != nil {
		return 0
	}
	return st.Ino
}

// watch serves the creator's watch connection until it ends: every exit is sent on it, so the
// creator knows which terminals' programs still run should this daemon die (daemon/orphans.go).
func (s *Server) watch(c *wire.Conn) {
	s.watchMu.Lock()
	s.watchers[c] = true
	s.watchMu.Unlock()
	_, _ = io.Copy(io.Discard, c)
	s.watchMu.Lock()
	delete(s.watchers, c)
	s.watchMu.Unlock()
}

func (s *Server) tellWatchers(ev wire.Exited) {
	s.watchMu.Lock()
	defer s.watchMu.Unlock()
	for c := range s.watchers {
		_ = c.Send(ev)
	}
}

func (s *Server) info(id string, e *entry) wire.TermInfo {
	return wire.TermInfo{Name: e.name, ID: id, Instance: s.ID, Status: wire.Status(e.t.Status())}
}

func (s *Server) list() []wire.TermInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]wire.TermInfo, 0, len(s.terms))
	for id, e := range s.terms {
		out = append(out, s.info(id, e))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

func (s *Server) clean(a wire.CleanArgs) error {
	e, err := s.lookup(a.ID)
	if err != nil {
		return err
	}
	if e.t.Status().Running {
		if !a.Force {
			return wire.Errorf(wire.CodeConflict, "force", "terminal %s is still running; cancel it first or pass --force", e.name)
		}
		_ = e.t.Signal(syscall.SIGKILL)
		<-e.t.Done()
	}
	s.mu.Lock()
	delete(s.terms, a.ID)
	s.mu.Unlock()
	_ = unix.Unlinkat(int(s.state.Fd()), a.ID+".transcript", 0)
	return nil
}

var errUnknownOp = errors.New("unknown operation")
