package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"

	"github.com/allox-os/allox/services/internal/tracked"
)

// Where a sandboxed run sees the daemon: its session's socket, the client and the python shims.
const (
	SessionSocketTarget = "/run/allox/session.sock"
	ClientTarget        = "/run/allox/bin/allox"
	// SessionSocketEnv names the socket in every run's environment: SessionSocketTarget in a
	// sandboxed run, the socket's guest path in a managed one (which sees the whole guest).
	SessionSocketEnv = "ALLOX_SESSION_SOCKET"
)

// Shims are the python shims installed beside the client and bound at /run/allox/<name>.
var Shims = []string{"network.py", "share.py"}

// maxSocketPath is the longest AF_UNIX socket path (sockaddr_un.sun_path holds 108 bytes with
// its terminating NUL).
const maxSocketPath = 107

// socketName is a session's socket file name: a hash of its ids, so that any ids fit the
// AF_UNIX path limit.
func socketName(ref SessionRef) string { return ref.Hash() + ".sock" }

// socketNameLen is the length of every socketName (and the bound of an agent socket's).
const socketNameLen = 32 + len(".sock")

// boundPathLen is the longest path below the directory a socket has while it is bound: in its
// staging directory (listen's os.MkdirTemp, ".new-" and a decimal uint32), before the rename.
const boundPathLen = len("/.new-4294967295/") + socketNameLen

// SessionSockets are the sessions' own sockets: one AF_UNIX socket per session in one directory
// outside every workspace, serving the router's ScopeSession actions over the /v1/rpc envelope
// with the session as the caller (known from the socket that accepted the connection, never from
// what the caller says). Each is bound into the session's sandboxed runs at
// SessionSocketTarget; no other session's run can reach it, since no run sees the directory.
//
// The directory is root's, mode 0711: bwrap, already the run's uid, can reach a socket it is
// told the name of, but nothing can list the directory. Each socket belongs to the run uid, mode
// 0600. A socket is made when a run of its session starts and removed with the session; the
// daemon clears the directory when it starts (no run outlives a daemon: a restarted daemon
// kills the runs it finds live), so the first run of each session after a restart makes a new one.
type SessionSockets struct {
	dir      string
	uid, gid int
	client   string // "" binds no client
	router   *Router
	log      *slog.Logger
	ctx      context.Context

	mu     sync.Mutex
	socks  map[SessionRef]*sessionSocket
	agents map[string]*agentSocket // by id: the sessions' forwarded SSH agents (sshagent.go)
	closed bool
}

type sessionSocket struct {
	path string
	srv  *http.Server
}

// OpenSessionSockets prepares cfg.SessionSockets (made if missing, mode 0711, emptied of what an
// earlier daemon left) and checks cfg.Client and its shims. Sockets serve until ctx ends or Close.
func OpenSessionSockets(ctx context.Context, cfg Config, router *Router, log *slog.Logger) (*SessionSockets, error) {
	s := &SessionSockets{dir: cfg.SessionSockets, uid: int(cfg.RunUID), gid: int(cfg.RunGID), client: cfg.Client,
		router: router, log: log, ctx: ctx, socks: map[SessionRef]*sessionSocket{}, agents: map[string]*agentSocket{}}
	if err := s.checkClient(); err != nil {
		return nil, err
	}
	if err := s.prepareDir(); err != nil {
		return nil, fmt.Errorf("--session-sockets %s: %w", s.dir, err)
	}
	return s, nil
}

func (s *SessionSockets) checkClient() error {
	if s.client == "" {
		return nil
	}
	for _, p := range s.clientFiles() {
		fi, err := os.Stat(p[0])
		if err == nil && !fi.Mode().IsRegular() {
			err = fmt.Errorf("%s is not a regular file", p[0])
		}
		if err != nil {
			return fmt.Errorf("--client %s: %w: install the client and its shims (mkimage does, for every image with the workspace daemon), or pass --client \"\" to bind none", s.client, err)
		}
	}
	return nil
}

// clientFiles are the client's and the shims' (source, target) pairs.
func (s *SessionSockets) clientFiles() [][2]string {
	if s.client == "" {
		return nil
	}
	files := [][2]string{{s.client, ClientTarget}}
	for _, name := range Shims {
		files = append(files, [2]string{filepath.Join(filepath.Dir(s.client), name), filepath.Join(filepath.Dir(SessionSocketTarget), name)})
	}
	return files
}

// prepareDir makes the directory root's and 0711, checks bwrap (the run uid) can traverse
// every directory above it, and removes every entry in it.
func (s *SessionSockets) prepareDir() error {
	if err := os.MkdirAll(s.dir, 0o711); err != nil {
		return err
	}
	fi, err := os.Lstat(s.dir)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return errors.New("not a directory: name a directory of its own for the sessions' sockets")
	}
	if err := os.Lchown(s.dir, 0, 0); err != nil {
		return err
	}
	if err := os.Chmod(s.dir, 0o711); err != nil {
		return err
	}
	for d := filepath.Dir(s.dir); ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return err
		}
		if fi.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("%s is mode %s: bwrap runs as the run uid and must traverse it to bind a session's socket: chmod o+x %s, or name another directory", d, fi.Mode().Perm(), d)
		}
		if d == "/" {
			break
		}
	}
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries { // an earlier daemon's sockets: no run outlived it
		errs = append(errs, os.RemoveAll(filepath.Join(s.dir, e.Name())))
	}
	return errors.Join(errs...)
}

// Extra returns what a run of the session gets: the socket (made now if the session has none)
// bound at SessionSocketTarget, the client and shims read-only, and SessionSocketEnv. A managed
// run sees the guest itself, so it gets only the variable, naming the socket's guest path. The
// caller must have checked that the session exists.
func (s *SessionSockets) Extra(agent, session string, managed bool) (tracked.Extra, error) {
	var x tracked.Extra
	if s == nil {
		return x, nil
	}
	path, err := s.ensure(SessionRef{AgentID: agent, SessionID: session})
	if err != nil {
		return x, err
	}
	if managed {
		x.Env = map[string]string{SessionSocketEnv: path}
		return x, nil
	}
	x.Env = map[string]string{SessionSocketEnv: SessionSocketTarget}
	x.Mounts = []tracked.Mount{{Source: path, Target: SessionSocketTarget}}
	for _, f := range s.clientFiles() {
		x.Mounts = append(x.Mounts, tracked.Mount{Source: f[0], Target: f[1], ReadOnly: true})
	}
	return x, nil
}

// ensure returns the session's socket path, making and serving the socket if it has none.
func (s *SessionSockets) ensure(ref SessionRef) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return "", errors.New("session sockets: the daemon is shutting down")
	}
	if ss, ok := s.socks[ref]; ok {
		return ss.path, nil
	}
	ln, path, err := s.listen(socketName(ref))
	if err != nil {
		return "", fmt.Errorf("session socket of %s/%s: %w", ref.AgentID, ref.SessionID, err)
	}
	caller := ref
	h := &endpoint{router: s.router, origin: Session, caller: &caller, log: s.log}
	ss := &sessionSocket{path: path, srv: newServer(s.ctx, h, s.log)}
	s.socks[ref] = ss
	go func() {
		if err := ss.srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			s.log.LogAttrs(s.ctx, slog.LevelError, "session socket failed", slog.String("agent_id", ref.AgentID),
				slog.String("session_id", ref.SessionID), slog.String("error", err.Error()))
		}
	}()
	s.log.LogAttrs(s.ctx, slog.LevelInfo, "session socket", slog.String("agent_id", ref.AgentID),
		slog.String("session_id", ref.SessionID), slog.String("path", path))
	return path, nil
}

// listen binds a socket named name in a private directory, hands it to the run uid with mode
// 0600 and only then renames it into place, so that it is never reachable with other modes.
func (s *SessionSockets) listen(name string) (net.Listener, string, error) {
	path := filepath.Join(s.dir, name)
	staging, err := os.MkdirTemp(s.dir, ".new-")
	if err != nil {
		return nil, "", err
	}
	defer os.RemoveAll(staging)
	tmp := filepath.Join(staging, name)
	ln, err := net.Listen("unix", tmp)
	if err != nil {
		return nil, "", err
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false) // Remove and Close unlink the final path
	err = errors.Join(os.Chown(tmp, s.uid, s.gid), os.Chmod(tmp, 0o600), os.Rename(tmp, path))
	if err != nil {
		ln.Close()
		return nil, "", err
	}
	return ln, path, nil
}

// Remove stops serving the session's socket and removes it (session.delete: the session and so
// its runs are gone). A session without a socket is not an error.
func (s *SessionSockets) Remove(agent, session string) error {
	if s == nil {
		return nil
	}
	ref := SessionRef{AgentID: agent, SessionID: session}
	s.mu.Lock()
	ss, ok := s.socks[ref]
	delete(s.socks, ref)
	var agents []*agentSocket
	for _, a := range s.agents {
		if a.ref == ref {
			agents = append(agents, a)
		}
	}
	s.mu.Unlock()
	for _, a := range agents { // the session is gone: so are its forwarded agents
		a.close()
	}
	if !ok {
		return nil
	}
	return ss.close()
}

func (ss *sessionSocket) close() error {
	err := ss.srv.Close()
	if rerr := os.Remove(ss.path); !errors.Is(rerr, os.ErrNotExist) {
		err = errors.Join(err, rerr)
	}
	return err
}

// Close lets calls in flight finish (up to ShutdownTimeout), then stops every socket and
// removes it.
func (s *SessionSockets) Close() error {
	s.mu.Lock()
	s.closed = true
	socks := s.socks
	s.socks = map[SessionRef]*sessionSocket{}
	agents := s.agents
	s.mu.Unlock()
	for _, a := range agents {
		a.close()
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(s.ctx), ShutdownTimeout)
	defer cancel()
	var errs []error
	for _, ss := range socks {
		_ = ss.srv.Shutdown(ctx) // close cuts what Shutdown left
		errs = append(errs, ss.close())
	}
	return errors.Join(errs...)
}
