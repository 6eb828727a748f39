package main

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"

	"github.com/allox-os/allox/internal/rpc"
	"github.com/allox-os/allox/internal/testenv"
)

// agentDaemon is a daemon on a real store with agent a and its sessions s and other, and its
// host listener's client.
func agentDaemon(t *testing.T) (loop string, host *rpc.Client) {
	t.Helper()
	testenv.Tool(t, "ssh-add", "apt-get install openssh-client")
	loop, host, _ = hostDaemon(t, build(t), btrfsRoot(t))
	mustPost(t, loop, `{"action":"agent.create","params":{"agent_id":"a"}}`)
	mustPost(t, loop, `{"action":"session.create","params":{"agent_id":"a","session_id":"s"}}`)
	mustPost(t, loop, `{"action":"session.create","params":{"agent_id":"a","session_id":"other"}}`)
	return loop, host
}

// forwardAgent opens session.ssh_agent for a/session and serves keyring on every connection it
// announces, as the Probe serves its SSH client's agent; it returns the id and the stream
// (closing it ends the forwarding).
func forwardAgent(t *testing.T, host *rpc.Client, session string, keyring agent.Agent) (string, io.Closer) {
	t.Helper()
	stream, err := host.Stream(context.Background(), rpc.ActionSessionSSHAgent, map[string]string{"agent_id": "a", "session_id": session})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stream.Close() })
	lines := bufio.NewScanner(stream)
	var first rpc.SSHAgentEvent
	if !lines.Scan() || json.Unmarshal(lines.Bytes(), &first) != nil || first.SSHAgent == "" {
		t.Fatalf("session.ssh_agent's first line %q (%v): want the socket's id", lines.Text(), lines.Err())
	}
	go func() {
		for lines.Scan() {
			var ev rpc.SSHAgentEvent
			if json.Unmarshal(lines.Bytes(), &ev) != nil || ev.Conn == "" {
				continue
			}
			conn, err := host.Stream(context.Background(), rpc.ActionSessionSSHAgentConn,
				rpc.SSHAgentConnParams{AgentID: "a", SessionID: session, SSHAgent: first.SSHAgent, Conn: ev.Conn})
			if err != nil {
				t.Errorf("session.ssh_agent_conn: %v", err)
				continue
			}
			go func() { agent.ServeAgent(keyring, conn); conn.Close() }()
		}
	}()
	return first.SSHAgent, stream
}

func testKeyring(t *testing.T, comment string) (agent.Agent, ssh.PublicKey) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	keyring := agent.NewKeyring()
	if err := keyring.Add(agent.AddedKey{PrivateKey: priv, Comment: comment}); err != nil {
		t.Fatal(err)
	}
	sshPub, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return keyring, sshPub
}

func execOut(t *testing.T, host *rpc.Client, params map[string]any) (string, rpc.Run) {
	t.Helper()
	x, err := host.Exec(context.Background(), params)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	var out strings.Builder
	done := make(chan struct{})
	go func() { io.Copy(&out, x.Stderr); close(done) }()
	b, _ := io.ReadAll(x.Stdout)
	<-done
	return string(b) + out.String(), waitExec(t, x)
}

// A run started with the forwarded agent's id reaches the host's agent through SSH_AUTH_SOCK
// (OpenSSH's ssh-add lists its key); a run of the same session started without it has neither
// the variable nor the socket.
func TestSSHAgentForwarded(t *testing.T) {
	_, host := agentDaemon(t)
	keyring, pub := testKeyring(t, "forwarded-key-7f3a")
	id, _ := forwardAgent(t, host, "s", keyring)

	out, end := execOut(t, host, map[string]any{"agent_id": "a", "session_id": "s", "ssh_agent": id,
		"argv": []string{"/bin/sh", "-c", `echo sock=$SSH_AUTH_SOCK; ssh-add -l; ssh-add -l`}})
	if exitCode(end) != 0 || !strings.Contains(out, "sock="+rpc.SSHAgentTarget) ||
		strings.Count(out, ssh.FingerprintSHA256(pub)) != 2 || !strings.Contains(out, "forwarded-key-7f3a") {
		t.Fatalf("ssh-add -l twice in the run: exit %v, %q; want the forwarded key %s listed twice (two connections)", exitCode(end), out, ssh.FingerprintSHA256(pub))
	}

	out, end = execOut(t, host, map[string]any{"agent_id": "a", "session_id": "s",
		"argv": []string{"/bin/sh", "-c", `echo sock=[$SSH_AUTH_SOCK]; test -e ` + rpc.SSHAgentTarget + ` && echo socket-visible; exit 0`}})
	if !strings.Contains(out, "sock=[]") || strings.Contains(out, "socket-visible") {
		t.Fatalf("a run without params.ssh_agent: %q; want no SSH_AUTH_SOCK and no agent socket", out)
	}
}

// Attack: a run of another session names the session's agent id. It is refused as if the id
// did not exist, and nothing runs.
func TestSSHAgentAttackOtherSession(t *testing.T) {
	loop, host := agentDaemon(t)
	keyring, _ := testKeyring(t, "k")
	id, _ := forwardAgent(t, host, "s", keyring)
	_, err := host.Exec(context.Background(), map[string]any{"agent_id": "a", "session_id": "other", "ssh_agent": id,
		"argv": []string{"/bin/sh", "-c", "ssh-add -l"}})
	var rerr *rpc.Error
	if !errors.As(err, &rerr) || rerr.Code != rpc.CodeNotFound || rerr.Field != "params.ssh_agent" {
		t.Fatalf("process.exec in another session with the agent's id: %v; want not_found on params.ssh_agent", err)
	}
	if runs := mustPost(t, loop, `{"action":"process.list","params":{"agent_id":"a","session_id":"other"}}`); strings.Contains(string(runs), "run_id") {
		t.Fatalf("the refused request left a run: %s", runs)
	}
}

// Attack: a run keeps the socket after the forwarding has ended (its SSH connection closed). The
// agent is gone for it — ssh-add finds nothing to talk to — and the id is refused from then on.
func TestSSHAgentAttackAfterClose(t *testing.T) {
	_, host := agentDaemon(t)
	keyring, pub := testKeyring(t, "k")
	id, stream := forwardAgent(t, host, "s", keyring)
	x, err := host.Exec(context.Background(), map[string]any{"agent_id": "a", "session_id": "s", "ssh_agent": id,
		"argv": []string{"/bin/sh", "-c", `ssh-add -l; echo first=$?; read go; ssh-add -l; echo second=$?`}})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	go io.Copy(io.Discard, x.Stderr)
	if first := testenv.ReadUntil(t, x.Stdout, "first=0"); !strings.Contains(first, ssh.FingerprintSHA256(pub)) {
		t.Fatalf("ssh-add while forwarding: %q; want the forwarded key", first)
	}
	stream.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := host.Exec(context.Background(), map[string]any{"agent_id": "a", "session_id": "s", "ssh_agent": id, "argv": []string{"true"}})
		var rerr *rpc.Error
		if errors.As(err, &rerr) && rerr.Code == rpc.CodeNotFound {
			break
		}
		if err == nil && time.Now().After(deadline) {
			t.Fatal("the agent's id is still accepted 10 s after its stream closed")
		}
		time.Sleep(50 * time.Millisecond)
	}
	io.WriteString(x, "go\n")
	out := testenv.ReadUntil(t, x.Stdout, "second=")
	rest, _ := io.ReadAll(x.Stdout)
	if strings.Contains(out+string(rest), "second=0") || strings.Contains(out, ssh.FingerprintSHA256(pub)) {
		t.Fatalf("ssh-add after the forwarding ended: %q; want it to fail", out+string(rest))
	}
}

// Bad requests: SSH_AUTH_SOCK given beside params.ssh_agent, an unknown id, a connection id
// that was never announced. Each names its field, and nothing runs.
func TestSSHAgentBadRequests(t *testing.T) {
	_, host := agentDaemon(t)
	keyring, _ := testKeyring(t, "k")
	id, _ := forwardAgent(t, host, "s", keyring)
	for _, c := range []struct {
		action string
		params any
		field  string
	}{
		{rpc.ActionProcessStart, map[string]any{"agent_id": "a", "session_id": "s", "ssh_agent": id, "argv": []string{"true"}, "env": map[string]string{"SSH_AUTH_SOCK": "/tmp/x"}}, "params.env.SSH_AUTH_SOCK"},
		{rpc.ActionProcessStart, map[string]any{"agent_id": "a", "session_id": "s", "ssh_agent": "0123", "argv": []string{"true"}}, "params.ssh_agent"},
		{rpc.ActionSessionSSHAgentConn, rpc.SSHAgentConnParams{AgentID: "a", SessionID: "s", SSHAgent: id, Conn: "never"}, "params.conn"},
		{rpc.ActionSessionSSHAgentConn, rpc.SSHAgentConnParams{AgentID: "a", SessionID: "other", SSHAgent: id, Conn: "never"}, "params.ssh_agent"},
	} {
		var err error
		if c.action == rpc.ActionProcessStart {
			err = host.Call(context.Background(), c.action, c.params, nil)
		} else {
			var s io.Closer
			s, err = host.Stream(context.Background(), c.action, c.params)
			if s != nil {
				s.Close()
			}
		}
		var rerr *rpc.Error
		if !errors.As(err, &rerr) || rerr.Field != c.field {
			t.Errorf("%s %+v: %v; want an error on %s", c.action, c.params, err, c.field)
		}
	}
}
