package sshremote

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	"golang.org/x/crypto/ssh"

	"github.com/allox-os/allox/internal/rpc"
)

// Agent forwarding (ssh -A): a session channel's auth-agent-req@openssh.com, when the
// certificate permits it, has the appliance make the connection's agent socket
// (session.ssh_agent); the channel's run, and every later run of the connection whose channel
// asked, gets it as SSH_AUTH_SOCK. Each connection a run makes to the socket becomes an
// auth-agent@openssh.com channel to the client, carried by a session.ssh_agent_conn stream of
// the appliance's: the keys never leave the client, the Probe and the appliance only carry
// bytes. The socket ends with the connection. A persistent fallback terminal outlives its
// connection, so it never gets the agent.

// agentForward is a connection's forwarded agent.
type agentForward struct {
	once   sync.Once
	id     string
	err    error
	stream io.Closer
}

// forwardAgent opens the connection's agent socket on its appliance (once) and returns its id.
func (c *conn) forwardAgent() (string, error) {
	f := &c.fwd
	f.once.Do(func() {
		params := map[string]string{"agent_id": c.agent, "session_id": c.session}
		stream, err := c.appliance.Stream(context.Background(), rpc.ActionSessionSSHAgent, params)
		if err != nil {
			f.err = err
			return
		}
		lines := bufio.NewScanner(stream)
		var first rpc.SSHAgentEvent
		if !lines.Scan() || json.Unmarshal(lines.Bytes(), &first) != nil || first.SSHAgent == "" {
			stream.Close()
			f.err = fmt.Errorf("the appliance's %s stream did not name its socket", rpc.ActionSessionSSHAgent)
			return
		}
		f.id, f.stream = first.SSHAgent, stream
		go c.carryAgent(lines, first.SSHAgent)
	})
	return f.id, f.err
}

// carryAgent carries each connection the appliance announces to a new auth-agent channel of the
// client, until the announcements end (the connection or the session is gone).
func (c *conn) carryAgent(lines *bufio.Scanner, id string) {
	for lines.Scan() {
		var ev rpc.SSHAgentEvent
		if json.Unmarshal(lines.Bytes(), &ev) != nil || ev.Conn == "" {
			continue
		}
		go c.carryAgentConn(id, ev.Conn)
	}
}

func (c *conn) carryAgentConn(id, cid string) {
	a := Activity{Channel: "auth-agent", Start: c.s.cfg.Now()}
	defer func() { a.End = c.s.cfg.Now(); c.activity(a) }()
	stream, err := c.appliance.Stream(context.Background(), rpc.ActionSessionSSHAgentConn,
		rpc.SSHAgentConnParams{AgentID: c.agent, SessionID: c.session, SSHAgent: id, Conn: cid})
	if err != nil {
		a.Error = err.Error()
		return
	}
	defer stream.Close()
	ch, reqs, err := c.sc.OpenChannel("auth-agent@openssh.com", nil)
	if err != nil { // the client has no agent after all: the run's connection ends at once
		var oc *ssh.OpenChannelError
		if errors.As(err, &oc) {
			a.Error = "the client refused the agent channel: " + oc.Message
		} else {
			a.Error = err.Error()
		}
		return
	}
	defer ch.Close()
	go ssh.DiscardRequests(reqs)
	rpc.Splice(stream, ch)
}

// endAgent closes the connection's agent socket, if it has one.
func (c *conn) endAgent() {
	if c.fwd.stream != nil {
		c.fwd.stream.Close()
	}
}
