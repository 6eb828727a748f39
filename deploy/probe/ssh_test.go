package probe

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"

	"github.com/allox-os/allox/internal/btrfstest"
)

var sshRE = regexp.MustCompile(`msg="ssh listening" .*addr=(\S+)`)

// ssh_remote end to end: the Gateway's SSH CA, a credential it issues only with an approval
// reference, the Probe's endpoint admitting it into the session's sandbox of the DevBox it
// placed, the exit status back, and the Gateway's audit holding the issuance and the Probe's
// activity report — metadata, not the command or its output.
func TestSSHRemoteThroughProbe(t *testing.T) {
	f, gwURL, _, sshAddr := alphaWithSSH(t)
	c := sshLogin(t, f, gwURL, sshAddr, "alpha", "s1", "main+s1")
	s, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	out, err := s.CombinedOutput("echo secret-output-$((6*7)); id -u; exit 5")
	if exitOf(err) != 5 || !strings.Contains(string(out), "secret-output-42") || !strings.Contains(string(out), "2000") {
		t.Fatalf("exec through the Probe: %q %v, want the sandbox's output as uid 2000 and exit 5", out, err)
	}

	// ssh -A: the run lists the client's key through the agent the Probe forwards
	keyring := agent.NewKeyring()
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	if err := keyring.Add(agent.AddedKey{PrivateKey: priv}); err != nil {
		t.Fatal(err)
	}
	keys, _ := keyring.List()
	if err := agent.ForwardToAgent(c, keyring); err != nil {
		t.Fatal(err)
	}
	s, err = c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	s.Stderr = &stderr
	if err := agent.RequestAgentForwarding(s); err != nil {
		s.Close()
		t.Fatalf("agent forwarding through the Probe: %v %s", err, stderr.String())
	}
	s.Stderr = nil
	if out, err := s.CombinedOutput("ssh-add -l"); err != nil || !strings.Contains(string(out), ssh.FingerprintSHA256(keys[0])) {
		t.Fatalf("ssh-add -l with the forwarded agent: %v %q", err, out)
	}
	c.Close()
	var audit string
	eventually(t, "the activity in the Gateway's audit", func() bool {
		audit = runGatewayCLI(t, f, gwURL, "audit", "--limit", "500")
		return strings.Contains(audit, `ssh_remote exec by \"alice\"`)
	})
	if !strings.Contains(audit, "ssh_cert") || !strings.Contains(audit, "CHG-7") {
		t.Errorf("the audit has no ssh_cert with its approval:\n%s", audit)
	}
	for _, content := range []string{"secret-output", "exit 5;"} {
		if strings.Contains(audit, content) {
			t.Errorf("the audit holds content %q:\n%s", content, audit)
		}
	}
}

// alphaWithSSH starts a Gateway with an SSH CA and a Probe with the process runtime and the
// ssh_remote endpoint, applies alpha and waits until it runs; it returns the endpoint's address.
func alphaWithSSH(t *testing.T) (f *fleet, gwURL string, h *probeHost, sshAddr string) {
	t.Helper()
	needBtrfs(t)
	store := btrfstest.Mount(t)
	f = newFleet(t)
	if out, err := execCmd(bins(t)["gateway"], "ca", "ssh-init", "--dir", f.pki); err != nil {
		t.Fatalf("gateway ca ssh-init: %v %s", err, out)
	}
	gwURL, _, _ = f.gateway("a", "")
	h = f.probe("host-a", gwURL, store, 1, "--ssh-listen", "127.0.0.1:0", "--ssh-user-ca", filepath.Join(f.pki, "ssh-ca.pub"))
	sshAddr = h.p.find(t, sshRE)
	runGatewayCLI(t, f, gwURL, "apply", writeSpec(t, alphaSpec))
	eventually(t, "alpha running", running(t, f.admin(gwURL), "alpha", "host-a"))
	return f, gwURL, h, sshAddr
}

func newSSHKey(t *testing.T) ssh.Signer {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func execCmd(bin string, args ...string) (string, error) {
	out, err := exec.Command(bin, args...).CombinedOutput()
	return string(out), err
}

// sshLogin gets a credential from the Gateway for devbox's session (after checking that it is
// refused without an approval and for a session the DevBox does not have) and logs in as login
// on the Probe's endpoint at addr.
func sshLogin(t *testing.T, f *fleet, gwURL, addr, devbox, session, login string) *ssh.Client {
	t.Helper()
	dir := t.TempDir()
	key := newSSHKey(t)
	pub := filepath.Join(dir, "id.pub")
	if err := os.WriteFile(pub, ssh.MarshalAuthorizedKey(key.PublicKey()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out := runGatewayCLIErr(t, f, gwURL, "ssh-cert", "--key", pub, "--who", "alice", devbox, session); !strings.Contains(out, "opens the session's sandbox to a person") {
		t.Fatalf("ssh-cert without approval: %s, want a refusal naming the approval", out)
	}
	if out := runGatewayCLIErr(t, f, gwURL, "ssh-cert", "--key", pub, "--who", "alice", "--approval", "CHG-7", devbox, "nope"); !strings.Contains(out, "not a session of devbox") {
		t.Fatalf("ssh-cert for an unknown session: %s", out)
	}
	certFile := filepath.Join(dir, "id-cert.pub")
	runGatewayCLI(t, f, gwURL, "ssh-cert", "--key", pub, "--who", "alice", "--approval", "CHG-7", "--ttl", "10m", "--agent-forwarding", "-o", certFile, devbox, session)
	b, err := os.ReadFile(certFile)
	if err != nil {
		t.Fatal(err)
	}
	pk, _, _, _, err := ssh.ParseAuthorizedKey(b)
	if err != nil {
		t.Fatal(err)
	}
	cert := pk.(*ssh.Certificate)
	if _, ok := cert.Permissions.Extensions["permit-agent-forwarding"]; !ok {
		t.Errorf("ssh-cert --agent-forwarding: the certificate's extensions %v have no permit-agent-forwarding", cert.Permissions.Extensions)
	}
	if got := time.Duration(cert.ValidBefore-cert.ValidAfter) * time.Second; got > 12*time.Minute {
		t.Errorf("the credential is valid for %s, want about 10 min", got)
	}
	signer, err := ssh.NewCertSigner(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := ssh.Dial("tcp", addr, &ssh.ClientConfig{User: login, Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)},
		HostKeyCallback: ssh.InsecureIgnoreHostKey(), Timeout: 60 * time.Second})
	if err != nil {
		t.Fatalf("ssh to the Probe: %v", err)
	}
	return c
}

// exitOf is an SSH command's exit status (-1 when it did not exit with one).
func exitOf(err error) int {
	var ee *ssh.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.ExitStatus()
	}
	return -1
}
