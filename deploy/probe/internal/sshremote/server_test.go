package sshremote

import (
	"bufio"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pkg/sftp"
	"golang.org/x/crypto/ssh"

	"github.com/allox-os/allox/deploy/probe/internal/sshcert"
	"github.com/allox-os/allox/internal/rpc"
	"github.com/allox-os/allox/internal/testenv"
)

func exitStatus(t *testing.T, err error) int {
	t.Helper()
	if err == nil {
		return 0
	}
	var ee *ssh.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("not an exit status: %v", err)
	}
	return ee.ExitStatus()
}

// exec runs in the session's sandbox: its working directory is the session's current/, it is
// the run user, its exit status comes back, and it is a run of the session.
func TestExec(t *testing.T) {
	f := newFixture(t)
	c := f.login(t)
	s, err := c.NewSession()
	must(t, err)
	out, err := s.CombinedOutput(`pwd; id -u; echo "$HOME"; exit 42`)
	if got := exitStatus(t, err); got != 42 {
		t.Fatalf("exit status %d, want 42 (output %q)", got, out)
	}
	lines := strings.Fields(string(out))
	if len(lines) != 3 || lines[0] != f.current || lines[1] != "2000" || lines[2] != f.current {
		t.Fatalf("exec saw %q; want cwd and HOME %s and uid 2000", lines, f.current)
	}
	var list struct{ Runs []rpc.Run }
	must(t, f.host.Call(context.Background(), "process.list", map[string]any{"agent_id": "a", "session_id": "s"}, &list))
	if len(list.Runs) != 1 || list.Runs[0].ExitCode == nil || *list.Runs[0].ExitCode != 42 {
		t.Fatalf("the session's runs: %+v, want the exec's, exited 42", list.Runs)
	}
	// the activity names who, the channel and the run, and nothing of the command
	c.Close()
	var saw bool
	// reported when the channel ends, which the server sees after the client has gone
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline) && !hasExec(f.activities()); {
		time.Sleep(10 * time.Millisecond)
	}
	for _, a := range f.activities() {
		if strings.Contains(fmt.Sprintf("%+v", a), "exit 42") {
			t.Errorf("the activity carries the command: %+v", a)
		}
		if a.Channel == "exec" {
			saw = a.Who == "alice (approval 17)" && a.RunID == list.Runs[0].RunID && a.Exit != nil && *a.Exit == 42 && !a.End.IsZero()
		}
	}
	if !saw {
		t.Fatalf("no exec activity with who, run and exit status: %+v", f.activities())
	}
}

// A terminal: the size the client asked for, a window change, the shell's exit status.
func TestPTYShellResize(t *testing.T) {
	f := newFixture(t)
	s, err := f.login(t).NewSession()
	must(t, err)
	must(t, s.RequestPty("xterm", 24, 80, ssh.TerminalModes{}))
	in, err := s.StdinPipe()
	must(t, err)
	out, err := s.StdoutPipe()
	must(t, err)
	must(t, s.Shell())
	io.WriteString(in, "stty size; echo term=$TERM\n")
	testenv.ReadUntil(t, out, "term=xterm")
	must(t, s.WindowChange(40, 132))
	time.Sleep(100 * time.Millisecond) // the resize is a request without a reply
	io.WriteString(in, "stty size; exit 3\n")
	testenv.ReadUntil(t, out, "40 132")
	go io.Copy(io.Discard, out)
	if got := exitStatus(t, s.Wait()); got != 3 {
		t.Fatalf("shell exit status %d, want 3", got)
	}
}

// sftp puts and gets files in the session's workspace, as the run user.
func TestSFTP(t *testing.T) {
	f := newFixture(t)
	sc, err := sftp.NewClient(f.login(t))
	must(t, err)
	defer sc.Close()
	w, err := sc.Create("put.txt")
	must(t, err)
	w.Write([]byte("put over sftp\n"))
	must(t, w.Close())
	b, err := os.ReadFile(filepath.Join(f.current, "put.txt"))
	if err != nil || string(b) != "put over sftp\n" {
		t.Fatalf("the put file in current/: %q %v", b, err)
	}
	if fi, err := os.Stat(filepath.Join(f.current, "put.txt")); err == nil && fi.Sys().(*syscallStat).Uid != 2000 {
		t.Errorf("the put file belongs to uid %d, want the run user 2000", fi.Sys().(*syscallStat).Uid)
	}
	must(t, os.WriteFile(filepath.Join(f.current, "get.txt"), []byte("made in the workspace\n"), 0o644))
	r, err := sc.Open(f.current + "/get.txt")
	must(t, err)
	got, _ := io.ReadAll(r)
	r.Close()
	if string(got) != "made in the workspace\n" {
		t.Fatalf("sftp get: %q", got)
	}
	if _, err := sc.Open("/etc/shadow"); err == nil {
		t.Error("sftp opened /etc/shadow: the sftp server is not the run user in the sandbox")
	}
}

// direct-tcpip reaches a server a run of the session left listening; a closed port is refused
// at the channel's open, with the relay's reason.
func TestDirectTCPIP(t *testing.T) {
	f := newFixture(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0") // a free port for the sandbox's server
	must(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	var r rpc.Run
	must(t, f.host.Call(context.Background(), "process.start", map[string]any{"agent_id": "a", "session_id": "s",
		"argv": []string{"python3", "-m", "http.server", "--bind", "127.0.0.1", fmt.Sprint(port)}}, &r))
	c := f.login(t)
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
		return c.DialContext(ctx, "tcp", addr)
	}}}
	must(t, os.WriteFile(filepath.Join(f.current, "served.txt"), []byte("from the sandbox\n"), 0o644))
	var body []byte
	for i := 0; i < 100; i++ { // until the server listens
		resp, err := hc.Get(fmt.Sprintf("http://127.0.0.1:%d/served.txt", port))
		if err == nil {
			body, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if string(body) != "from the sandbox\n" {
		t.Fatalf("GET through direct-tcpip: %q", body)
	}
	_, err = c.Dial("tcp", "127.0.0.1:1")
	var oe *ssh.OpenChannelError
	if !errors.As(err, &oe) || oe.Reason != ssh.ConnectionFailed || !strings.Contains(oe.Message, "refused") {
		t.Fatalf("direct-tcpip to a closed port: %v, want connect failed saying refused", err)
	}
}

// direct-streamlocal reaches a socket a run of the session listens on.
func TestDirectStreamlocal(t *testing.T) {
	f := newFixture(t)
	sock := filepath.Join(f.current, "ide.sock")
	var r rpc.Run
	script := `import socket,os
s=socket.socket(socket.AF_UNIX); s.bind("ide.sock"); s.listen(1); c,_=s.accept(); c.sendall(c.recv(100).upper()); c.close()`
	must(t, f.host.Call(context.Background(), "process.start", map[string]any{"agent_id": "a", "session_id": "s", "argv": []string{"python3", "-c", script}}, &r))
	c := f.login(t)
	var conn net.Conn
	var err error
	for i := 0; i < 100; i++ {
		if conn, err = c.Dial("unix", sock); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	must(t, err)
	fmt.Fprint(conn, "over a unix socket")
	got, _ := bufio.NewReader(conn).ReadString('\n')
	if got != "OVER A UNIX SOCKET" {
		t.Fatalf("direct-streamlocal echo: %q", got)
	}
}

// OpenSSH's own ssh and sftp, with the Gateway's certificate.
func TestOpenSSHClient(t *testing.T) {
	testenv.Tool(t, "ssh", "apt-get install openssh-client")
	f := newFixture(t)
	dir := t.TempDir()
	key := filepath.Join(dir, "id_ed25519")
	must(t, exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", key).Run())
	pubBytes, err := os.ReadFile(key + ".pub")
	must(t, err)
	pub, _, _, _, err := ssh.ParseAuthorizedKey(pubBytes)
	must(t, err)
	cert, err := sshcert.Issue(f.ca, pub, grant(), time.Now(), 12*time.Hour)
	must(t, err)
	must(t, os.WriteFile(key+"-cert.pub", ssh.MarshalAuthorizedKey(cert), 0o644))
	host, port, _ := net.SplitHostPort(f.addr)
	opts := []string{"-F", "/dev/null", "-i", key, "-o", "CertificateFile=" + key + "-cert.pub", "-o", "IdentitiesOnly=yes",
		"-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes"}
	cmd := exec.Command("ssh", append(opts, "-p", port, "a+s@"+host, "echo from-openssh; exit 7")...)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 7 || !strings.Contains(string(out), "from-openssh") {
		t.Fatalf("ssh: %v %q, want exit 7 and the output", err, out)
	}
	must(t, os.WriteFile(filepath.Join(dir, "up.txt"), []byte("sftp put\n"), 0o644))
	batch := filepath.Join(dir, "batch")
	must(t, os.WriteFile(batch, []byte("put "+filepath.Join(dir, "up.txt")+" up.txt\nget up.txt "+filepath.Join(dir, "down.txt")+"\n"), 0o644))
	out, err = exec.Command("sftp", append(opts, "-P", port, "-b", batch, "a+s@"+host)...).CombinedOutput()
	if err != nil {
		t.Fatalf("sftp: %v %s", err, out)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "down.txt")); err != nil || string(b) != "sftp put\n" {
		t.Fatalf("sftp round trip: %q %v", b, err)
	}
}

// Each credential the endpoint must refuse, one per attack.
func TestRefusedCredentials(t *testing.T) {
	f := newFixture(t)
	other := newSigner(t) // a CA that is not the Gateway's
	forged := func() ssh.Signer {
		key := newSigner(t)
		cert, err := sshcert.Issue(other, key.PublicKey(), grant(), time.Now(), 12*time.Hour)
		must(t, err)
		s, _ := ssh.NewCertSigner(cert, key)
		return s
	}
	forever := func() ssh.Signer {
		key := newSigner(t)
		cert := &ssh.Certificate{Key: key.PublicKey(), CertType: ssh.UserCert, KeyId: "mallory", ValidPrincipals: []string{"a+s"},
			ValidAfter: 0, ValidBefore: ssh.CertTimeInfinity}
		must(t, cert.SignCert(rand.Reader, f.ca))
		s, _ := ssh.NewCertSigner(cert, key)
		return s
	}
	otherSession := grant()
	otherSession.Session = "s2"
	for _, tc := range []struct {
		name   string
		user   string
		signer func() ssh.Signer
		later  time.Duration // the endpoint's clock moved on by this
	}{
		{"plain key", "a+s", func() ssh.Signer { return newSigner(t) }, 0},
		{"another CA", "a+s", forged, 0},
		{"expired", "a+s", func() ssh.Signer { return f.certSigner(t, grant()) }, time.Hour},
		{"another session's certificate", "a+s", func() ssh.Signer { return f.certSigner(t, otherSession) }, 0},
		{"login as another session", "a+s2", func() ssh.Signer { return f.certSigner(t, grant()) }, 0},
		{"valid forever", "a+s", forever, 0},
		{"a session this Probe does not serve", "a+s2", func() ssh.Signer { return f.certSigner(t, otherSession) }, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f.mu.Lock()
			f.now = time.Now().Add(tc.later)
			f.mu.Unlock()
			c, err := f.dial(tc.user, tc.signer())
			if err == nil {
				c.Close()
				t.Fatal("logged in")
			}
		})
	}
}

// A certificate without permit-pty gets no terminal; without permit-port-forwarding no forward.
func TestCertificatePermissions(t *testing.T) {
	f := newFixture(t)
	g := grant()
	g.PTY, g.PortForwarding = false, false
	c, err := f.dial("a+s", f.certSigner(t, g))
	must(t, err)
	defer c.Close()
	s, err := c.NewSession()
	must(t, err)
	if err := s.RequestPty("xterm", 24, 80, ssh.TerminalModes{}); err == nil {
		t.Error("a terminal without permit-pty")
	}
	s.Close()
	_, err = c.Dial("tcp", "127.0.0.1:22")
	var oe *ssh.OpenChannelError
	if !errors.As(err, &oe) || oe.Reason != ssh.Prohibited {
		t.Fatalf("a forward without permit-port-forwarding: %v, want prohibited", err)
	}
}

// An SSH shell is a run of the session: a rollback with kill_processes ends it.
func TestRollbackEndsSSHShell(t *testing.T) {
	f := newFixture(t)
	s, err := f.login(t).NewSession()
	must(t, err)
	must(t, s.RequestPty("xterm", 24, 80, ssh.TerminalModes{}))
	in, _ := s.StdinPipe()
	out, _ := s.StdoutPipe()
	must(t, s.Shell())
	f.rollbackKills(t, s, in, out)
}

// rollbackKills waits until the shell on s answers, rolls the session back with kill_processes
// and checks that the shell's channel ends with exit-signal KILL.
func (f *fixture) rollbackKills(t *testing.T, s *ssh.Session, in io.Writer, out io.Reader) {
	t.Helper()
	io.WriteString(in, "echo ready-$((6*7))\n") // the echo of the line shows no 42
	testenv.ReadUntil(t, out, "ready-42")
	go io.Copy(io.Discard, out)
	must(t, f.host.Call(context.Background(), "session.rollback", map[string]any{"agent_id": "a", "session_id": "s",
		"checkpoint_id": "baseline", "kill_processes": true}, nil))
	done := make(chan error, 1)
	go func() { done <- s.Wait() }()
	select {
	case err := <-done:
		var ee *ssh.ExitError
		if !errors.As(err, &ee) || ee.Signal() != "KILL" {
			t.Fatalf("the shell after the rollback: %v, want killed (exit-signal KILL)", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the shell outlived a rollback with kill_processes")
	}
}

func hasExec(acts []Activity) bool {
	for _, a := range acts {
		if a.Channel == "exec" && !a.End.IsZero() {
			return true
		}
	}
	return false
}
