package sshremote

import (
	"crypto/ed25519"
	"crypto/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"

	"github.com/allox-os/allox/deploy/probe/internal/sshcert"
	"github.com/allox-os/allox/internal/testenv"
)

// agentGrant is grant() with agent forwarding permitted.
func agentGrant() sshcert.Grant {
	g := grant()
	g.AgentForwarding = true
	return g
}

// keyringWith is a client-side agent holding one new key, and that key's fingerprint.
func keyringWith(t *testing.T) (agent.Agent, string) {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	must(t, err)
	keyring := agent.NewKeyring()
	must(t, keyring.Add(agent.AddedKey{PrivateKey: priv, Comment: "client-key"}))
	keys, err := keyring.List()
	must(t, err)
	return keyring, ssh.FingerprintSHA256(keys[0])
}

// eventually polls cond for up to 10 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10 s", what)
		}
	}
}

// ssh -A with Go's client: the session's run lists the client's key through SSH_AUTH_SOCK, each
// agent connection is reported as activity, and a second connection that did not ask has no agent.
func TestAgentForwarding(t *testing.T) {
	testenv.Tool(t, "ssh-add", "apt-get install openssh-client")
	f := newFixture(t)
	c, err := f.dial("a+s", f.certSigner(t, agentGrant()))
	must(t, err)
	defer c.Close()
	keyring, fp := keyringWith(t)
	must(t, agent.ForwardToAgent(c, keyring))
	s, err := c.NewSession()
	must(t, err)
	must(t, agent.RequestAgentForwarding(s))
	out, err := s.CombinedOutput("echo sock=$SSH_AUTH_SOCK; ssh-add -l")
	if err != nil || !strings.Contains(string(out), fp) || !strings.Contains(string(out), "sock=/run/allox/ssh-agent.sock") {
		t.Fatalf("ssh-add -l in the session: %v %q; want the client's key %s", err, out, fp)
	}
	eventually(t, "the agent connection reported", func() bool {
		for _, a := range f.activities() {
			if a.Channel == "auth-agent" && a.Error == "" && !a.End.IsZero() {
				return true
			}
		}
		return false
	})

	other := f.login(t) // the same session, a connection that never asked for the agent
	s2, err := other.NewSession()
	must(t, err)
	out, _ = s2.CombinedOutput("echo sock=[$SSH_AUTH_SOCK]; ssh-add -l; ls /run/allox/")
	if !strings.Contains(string(out), "sock=[]") || strings.Contains(string(out), fp) || strings.Contains(string(out), "ssh-agent") {
		t.Fatalf("a connection without agent forwarding: %q; want no agent and no socket", out)
	}
}

// Attack: a certificate without permit-agent-forwarding asks for the agent anyway. The request
// is refused and the run has no agent socket.
func TestAgentForwardingNotPermitted(t *testing.T) {
	f := newFixture(t)
	c := f.login(t) // grant(): no agent forwarding
	keyring, _ := keyringWith(t)
	must(t, agent.ForwardToAgent(c, keyring))
	s, err := c.NewSession()
	must(t, err)
	if err := agent.RequestAgentForwarding(s); err == nil {
		t.Fatal("auth-agent-req accepted without permit-agent-forwarding")
	}
	out, _ := s.CombinedOutput("echo sock=[$SSH_AUTH_SOCK]; test -e /run/allox/ssh-agent.sock && echo socket-visible; true")
	if !strings.Contains(string(out), "sock=[]") || strings.Contains(string(out), "socket-visible") {
		t.Fatalf("after a refused forwarding: %q", out)
	}
}

// OpenSSH's ssh -A with a key in OpenSSH's ssh-agent: ssh-add -l in the session lists it.
func TestOpenSSHAgentForwarding(t *testing.T) {
	testenv.Tool(t, "ssh-agent", "apt-get install openssh-client")
	f := newFixture(t)
	dir := t.TempDir()
	key := filepath.Join(dir, "id_ed25519")
	must(t, exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "openssh-agent-key", "-f", key).Run())
	pubBytes, err := os.ReadFile(key + ".pub")
	must(t, err)
	pub, _, _, _, err := ssh.ParseAuthorizedKey(pubBytes)
	must(t, err)
	cert, err := sshcert.Issue(f.ca, pub, agentGrant(), time.Now(), 12*time.Hour)
	must(t, err)
	must(t, os.WriteFile(key+"-cert.pub", ssh.MarshalAuthorizedKey(cert), 0o644))
	sock := filepath.Join(dir, "agent.sock")
	agentCmd := exec.Command("ssh-agent", "-D", "-a", sock)
	must(t, agentCmd.Start())
	t.Cleanup(func() { agentCmd.Process.Kill(); agentCmd.Wait() })
	for i := 0; i < 100; i++ {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	env := append(os.Environ(), "SSH_AUTH_SOCK="+sock)
	add := exec.Command("ssh-add", key)
	add.Env = env
	if out, err := add.CombinedOutput(); err != nil {
		t.Fatalf("ssh-add: %v %s", err, out)
	}
	host, port, _ := strings.Cut(f.addr, ":")
	cmd := exec.Command("ssh", "-F", "/dev/null", "-A", "-i", key, "-o", "CertificateFile="+key+"-cert.pub",
		"-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes",
		"-p", port, "a+s@"+host, "ssh-add -l")
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), ssh.FingerprintSHA256(pub)) || !strings.Contains(string(out), "openssh-agent-key") {
		t.Fatalf("ssh -A … ssh-add -l: %v %q; want the key in OpenSSH's agent", err, out)
	}
}
