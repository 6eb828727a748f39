package daemon

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	"github.com/allox-os/allox/internal/rpc"
	"github.com/allox-os/allox/services/internal/plugin"
	"github.com/allox-os/allox/services/internal/tracked"
)

// SSH agent forwarding (session.ssh_agent, session.ssh_agent_conn, process.start's ssh_agent).
//
// A run's /tmp is its own, so no run can offer a socket to another; the daemon makes the agent
// socket instead, beside the sessions' own sockets (root's directory, mode 0711, that no run
// sees), the run uid's with mode 0600, and binds it into exactly the runs started with its id,
// at rpc.SSHAgentTarget, with SSH_AUTH_SOCK naming it. Every connection such a run makes is
// announced on the session.ssh_agent stream and carried by a session.ssh_agent_conn stream of
// the host's (the Probe opens an auth-agent channel to its SSH client for each): the daemon
// never speaks the agent protocol and never holds a key. The socket lives as long as the stream
// that made it (the SSH connection that asked for forwarding) and its session.

// Bounds of an agent socket.
const (
	// SSHAgentClaimWithin is how long a run's connection waits for its session.ssh_agent_conn.
	SSHAgentClaimWithin = 10 * time.Second
	// maxAgentPending is how many of a socket's connections may wait unclaimed at once; more are
	// closed as they come.
	maxAgentPending = 16
	// maxAgentsPerSession bounds the agent sockets one session may have open.
	maxAgentsPerSession = 16
)

// agentSocket is one session.ssh_agent stream's socket.
type agentSocket struct {
	id   string
	ref  SessionRef
	path string
	ln   net.Listener
	s    *SessionSockets

	mu      sync.Mutex
	pending map[string]net.Conn
	closed  bool
	wmu     sync.Mutex // the stream's writes
}

// openSSHAgent makes and binds a new agent socket for ref's session.
func (s *SessionSockets) openSSHAgent(ref SessionRef) (*agentSocket, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errors.New("session sockets: the daemon is shutting down")
	}
	n := 0
	for _, a := range s.agents {
		if a.ref == ref {
			n++
		}
	}
	if n >= maxAgentsPerSession {
		return nil, rpc.Errorf(rpc.CodeConflict, "params.session_id", "session %s/%s already has %d forwarded SSH agents open: close one (end its SSH connection) first", ref.AgentID, ref.SessionID, n)
	}
	id := randomID()
	ln, path, err := s.listen(agentSocketName(id))
	if err != nil {
		return nil, fmt.Errorf("SSH agent socket of %s/%s: %w", ref.AgentID, ref.SessionID, err)
	}
	a := &agentSocket{id: id, ref: ref, path: path, ln: ln, s: s, pending: map[string]net.Conn{}}
	s.agents[id] = a
	return a, nil
}

// agentSocketName is an agent socket's file name: never longer than a session socket's, whose
// length the daemon checks against the AF_UNIX limit when it starts.
func agentSocketName(id string) string { return "agent-" + id + ".sock" }

func randomID() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// agent returns ref's agent socket id, or an error naming field that says the same whether id
// is unknown or another session's.
func (s *SessionSockets) agent(ref SessionRef, id, field string) (*agentSocket, error) {
	if s == nil {
		return nil, rpc.Errorf(rpc.CodeInvalidParams, field, "this daemon has no session sockets (--session-sockets), so no SSH agent is forwarded")
	}
	s.mu.Lock()
	a, ok := s.agents[id]
	s.mu.Unlock()
	if !ok || a.ref != ref {
		return nil, rpc.Errorf(rpc.CodeNotFound, field, "no forwarded SSH agent %q for session %s/%s: give the id its session.ssh_agent stream named, while that stream is open", id, ref.AgentID, ref.SessionID)
	}
	return a, nil
}

// sshAgentExtra is what a run started with params.ssh_agent gets: the socket at
// rpc.SSHAgentTarget (a managed run sees the guest: only the variable, naming its guest path).
func (s *SessionSockets) sshAgentExtra(ref SessionRef, id string, managed bool) (tracked.Extra, error) {
	a, err := s.agent(ref, id, "params.ssh_agent")
	if err != nil {
		return tracked.Extra{}, err
	}
	if managed {
		return tracked.Extra{Env: map[string]string{"SSH_AUTH_SOCK": a.path}}, nil
	}
	return tracked.Extra{Env: map[string]string{"SSH_AUTH_SOCK": rpc.SSHAgentTarget},
		Mounts: []tracked.Mount{{Source: a.path, Target: rpc.SSHAgentTarget}}}, nil
}

// close stops the socket, removes it and drops its unclaimed connections (idempotent).
func (a *agentSocket) close() {
	a.s.mu.Lock()
	if a.s.agents[a.id] == a {
		delete(a.s.agents, a.id)
	}
	a.s.mu.Unlock()
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return
	}
	a.closed = true
	pending := a.pending
	a.pending = nil
	a.mu.Unlock()
	a.ln.Close()
	os.Remove(a.path)
	for _, c := range pending {
		c.Close()
	}
}

func (a *agentSocket) send(w io.Writer, ev rpc.SSHAgentEvent) error {
	b, _ := json.Marshal(ev)
	a.wmu.Lock()
	defer a.wmu.Unlock()
	_, err := w.Write(append(b, '\n'))
	return err
}

// serve announces the socket and then each connection to it on stream, until the host closes
// stream (or the session or the daemon goes), and then closes the socket.
func (a *agentSocket) serve(stream io.ReadWriteCloser, log *slog.Logger) error {
	defer stream.Close()
	defer a.close()
	if err := a.send(stream, rpc.SSHAgentEvent{SSHAgent: a.id}); err != nil {
		return err
	}
	go func() { // the host sends nothing: its EOF (or anything at all) ends the forwarding
		io.Copy(io.Discard, bufio.NewReader(stream))
		a.close()
	}()
	for {
		c, err := a.ln.Accept()
		if err != nil {
			return nil // closed
		}
		cid := randomID()
		a.mu.Lock()
		if a.closed || len(a.pending) >= maxAgentPending {
			a.mu.Unlock()
			c.Close()
			continue
		}
		a.pending[cid] = c
		a.mu.Unlock()
		time.AfterFunc(SSHAgentClaimWithin, func() {
			if c := a.take(cid); c != nil {
				log.Info("ssh agent connection not claimed in time", "agent_id", a.ref.AgentID, "session_id", a.ref.SessionID)
				c.Close()
			}
		})
		if err := a.send(stream, rpc.SSHAgentEvent{Conn: cid}); err != nil {
			return nil // the host is gone
		}
	}
}

// take removes and returns the unclaimed connection cid, or nil.
func (a *agentSocket) take(cid string) net.Conn {
	a.mu.Lock()
	defer a.mu.Unlock()
	c := a.pending[cid]
	delete(a.pending, cid)
	return c
}

func (h workspaceHandlers) sessionSSHAgent(ctx context.Context, c *Call) (any, error) {
	var p sessionParams
	if err := rpc.DecodeParams(c.Params, &p); err != nil {
		return nil, err
	}
	if _, err := h.w.GetSession(p.AgentID, p.SessionID); err != nil {
		return nil, err
	}
	if h.socks == nil {
		return nil, rpc.Errorf(rpc.CodeInvalidParams, "action", "this daemon has no session sockets (--session-sockets), so it cannot forward an SSH agent")
	}
	a, err := h.socks.openSSHAgent(SessionRef{AgentID: p.AgentID, SessionID: p.SessionID})
	if err != nil {
		return nil, err
	}
	var claimed sync.Once
	timer := time.AfterFunc(claimWithin, func() { claimed.Do(a.close) }) // the 101 never reached the host
	return plugin.Relay(func(stream io.ReadWriteCloser) error {
		ok := false
		claimed.Do(func() { ok = true; timer.Stop() })
		if !ok {
			stream.Close()
			return errors.New("ssh agent: the stream came too late; the socket was closed")
		}
		return a.serve(stream, h.socks.log)
	}), nil
}

func (h workspaceHandlers) sessionSSHAgentConn(ctx context.Context, c *Call) (any, error) {
	var p rpc.SSHAgentConnParams
	if err := rpc.DecodeParams(c.Params, &p); err != nil {
		return nil, err
	}
	a, err := h.socks.agent(SessionRef{AgentID: p.AgentID, SessionID: p.SessionID}, p.SSHAgent, "params.ssh_agent")
	if err != nil {
		return nil, err
	}
	conn := a.take(p.Conn)
	if conn == nil {
		return nil, rpc.Errorf(rpc.CodeNotFound, "params.conn", "no connection %q waiting on SSH agent %q: each is carried once, within %s of its announcement", p.Conn, p.SSHAgent, SSHAgentClaimWithin)
	}
	return plugin.Relay(func(stream io.ReadWriteCloser) error {
		defer conn.Close()
		defer stream.Close()
		rpc.Splice(stream, conn)
		return nil
	}), nil
}
