package probe

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/pkg/sftp"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"

	"github.com/allox-os/allox/deploy/probe/internal/wire"
	"github.com/allox-os/allox/internal/artifact"
	"github.com/allox-os/allox/internal/testenv"
	"github.com/allox-os/allox/internal/vm"
)

const applianceSpec = `
devbox "vmbox" {
  runtime = "qemu"
  agent   = "main"
  session "s1" {}
}
`

// vmFleet is the appliance's output directory, a PKI with the Gateway's SSH CA, a Gateway, and
// the certificate of the Probe of host vmhost.
func vmFleet(t *testing.T) (out string, f *fleet, gwURL string, gw *proc) {
	t.Helper()
	out = testenv.NeedOut(t, artifact.Boot, artifact.Kernel, artifact.Rootfs)
	testenv.Tool(t, "qemu-system-x86_64", "apt-get install qemu-system-x86")
	f = newFleet(t)
	if out, err := execCmd(bins(t)["gateway"], "ca", "ssh-init", "--dir", f.pki); err != nil {
		t.Fatalf("gateway ca ssh-init: %v %s", err, out)
	}
	// Slower leases than the other tests': a TCG guest on a shared machine starves the host.
	gwURL, _, gw = f.gateway("a", "", "--renew-every", "1s", "--stop-after", "8s", "--lost-after", "12s")
	if err := f.ca.IssueFiles(f.pki, "vmhost", "vmhost", wire.RoleProbe); err != nil {
		t.Fatal(err)
	}
	return out, f, gwURL, gw
}

// End to end with the real appliance under QEMU: apply a DevBox → the Gateway places it → the
// Probe boots the appliance, creates the agent and session and reports phases and capabilities →
// a session checkpoint and a rollback through the Gateway, and a VM snapshot over QMP → stop.
func TestApplianceEndToEnd(t *testing.T) {
	out, f, gwURL, _ := vmFleet(t)
	state := shortDir(t)
	t.Cleanup(func() { killSandboxes(state) }) // QEMU outlives the Probe by design
	probeProc := start(t, "vmhost", bins(t)["probe"], "serve", "--gateway", gwURL, "--host", "vmhost", "--pki", f.pki, "--state", state,
		"--slots", "1", "--appliance", out, "--supervise-every", "200ms",
		"--ssh-listen", "127.0.0.1:0", "--ssh-user-ca", f.pki+"/ssh-ca.pub")
	sshAddr := probeProc.find(t, sshRE)
	a := f.admin(gwURL)
	runGatewayCLI(t, f, gwURL, "apply", writeSpec(t, applianceSpec))
	deadline := time.Now().Add(vm.Scaled(3 * time.Minute))
	for !running(t, a, "vmbox", "vmhost")() {
		if time.Now().After(deadline) {
			b, _ := json.Marshal(lastSeen)
			t.Fatalf("vmbox not running under QEMU (accel %s): %s", vm.Accel(), b)
		}
		time.Sleep(100 * time.Millisecond)
	}
	var leases []wire.LeaseStatus
	if err := a.Do(t.Context(), "GET", wire.PathLeases, nil, &leases); err != nil || len(leases) != 1 {
		t.Fatalf("leases %v, %v", leases, err)
	}
	if c := leases[0].Capabilities; c.Accel != vm.Accel() || !strings.Contains(strings.Join(c.Runtimes, ","), "qemu") {
		t.Errorf("capabilities %+v: want accel %s and the qemu runtime", c, vm.Accel())
	}

	// ssh_remote into the session's sandbox in the guest: exec, then sftp through allox sftp-server
	c := sshLogin(t, f, gwURL, sshAddr, "vmbox", "s1", "main+s1")
	s, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s.CombinedOutput("echo guest-$((6*7)) $(uname -n); id -u; exit 3"); exitOf(err) != 3 || !strings.Contains(string(got), "guest-42 allox") ||
		!strings.Contains(string(got), "2000") {
		t.Errorf("ssh exec in the guest's sandbox: %q %v, want the guest's hostname, uid 2000, exit 3", got, err)
	}
	// ssh -A into the guest: its busybox has no ssh-add, so the run asks the forwarded agent for
	// its identities in the agent protocol itself, through allox relay on SSH_AUTH_SOCK
	keyring := agent.NewKeyring()
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	if err := keyring.Add(agent.AddedKey{PrivateKey: priv}); err != nil {
		t.Fatal(err)
	}
	if err := agent.ForwardToAgent(c, keyring); err != nil {
		t.Fatal(err)
	}
	if s, err = c.NewSession(); err != nil {
		t.Fatal(err)
	}
	if err := agent.RequestAgentForwarding(s); err != nil {
		t.Fatalf("agent forwarding into the guest: %v", err)
	}
	s.Stdin = bytes.NewReader([]byte{0, 0, 0, 1, 11}) // SSH_AGENTC_REQUEST_IDENTITIES
	reply, err := s.Output(`exec /run/allox/bin/allox relay unix "$SSH_AUTH_SOCK"`)
	// SSH_AGENT_IDENTITIES_ANSWER (12) with one key
	if err != nil || len(reply) < 9 || reply[4] != 12 || binary.BigEndian.Uint32(reply[5:9]) != 1 {
		t.Errorf("the forwarded agent asked from the guest's sandbox: %v %x, want an identities answer with one key", err, reply)
	}
	sc, err := sftp.NewClient(c)
	if err != nil {
		t.Fatalf("sftp in the guest: %v", err)
	}
	w, err := sc.Create("over-ssh.txt")
	if err == nil {
		_, err = w.Write([]byte("put through the Probe\n"))
		w.Close()
	}
	if err != nil {
		t.Fatalf("sftp put: %v", err)
	}
	r, err := sc.Open("over-ssh.txt")
	if err != nil {
		t.Fatalf("sftp get: %v", err)
	}
	got, _ := io.ReadAll(r)
	r.Close()
	sc.Close()
	c.Close()
	if string(got) != "put through the Probe\n" {
		t.Errorf("sftp round trip in the guest: %q", got)
	}

	// terminal_fallback in the guest: a persistent terminal of the session, on a PTY, that
	// survives the client's disconnect, redraws on reattach, resizes, and reports its exit status
	attach := func() (*ssh.Client, *ssh.Session, io.Writer, io.Reader) {
		c := sshLogin(t, f, gwURL, sshAddr, "vmbox", "s1", "main+s1")
		s, err := c.NewSession()
		if err != nil {
			t.Fatal(err)
		}
		if err := s.RequestPty("xterm", 24, 80, ssh.TerminalModes{}); err != nil {
			t.Fatal(err)
		}
		if err := s.Setenv("ALLOX_TERMINAL", "main"); err != nil {
			t.Fatal(err)
		}
		in, _ := s.StdinPipe()
		out, _ := s.StdoutPipe()
		if err := s.Shell(); err != nil {
			t.Fatalf("terminal_fallback shell in the guest: %v", err)
		}
		return c, s, in, out
	}
	tc, _, tin, tout := attach()
	io.WriteString(tin, "export KEPT=yes; echo started-$((6*7))\n") // the echoed line shows no 42
	testenv.ReadUntil(t, tout, "started-42")
	go io.Copy(io.Discard, tout)
	tc.Close()
	_, ts, tin, tout := attach()
	testenv.ReadUntil(t, tout, "started-42") // the screen, redrawn
	if err := ts.WindowChange(40, 132); err != nil {
		t.Fatal(err)
	}
	io.WriteString(tin, "echo kept=$KEPT size=$(stty size | tr ' ' x)\n")
	testenv.ReadUntil(t, tout, "kept=yes size=40x132")
	io.WriteString(tin, "exit 4\n")
	go io.Copy(io.Discard, tout)
	if err := ts.Wait(); exitOf(err) != 4 {
		t.Errorf("the guest's persistent terminal: %v, want exit status 4", err)
	}

	cp := runGatewayCLI(t, f, gwURL, "op", "--session", "s1", "--checkpoint", "before", "--wait", "60s", "checkpoint", "vmbox")
	if !strings.Contains(cp, `"checkpoint_id": "before"`) {
		t.Fatalf("checkpoint op: %s", cp)
	}
	runGatewayCLI(t, f, gwURL, "op", "--session", "s1", "--checkpoint", "after", "--wait", "60s", "checkpoint", "vmbox")
	rb := runGatewayCLI(t, f, gwURL, "op", "--session", "s1", "--checkpoint", "before", "--approval", "CHG-1", "--wait", "60s", "rollback", "vmbox")
	if !strings.Contains(rb, `"head": "before"`) {
		t.Errorf("rollback op: %s, want head before", rb)
	}
	snap := runGatewayCLI(t, f, gwURL, "op", "--wait", "120s", "vm_snapshot", "vmbox")
	if !strings.Contains(snap, `"vm_snapshot"`) {
		t.Errorf("vm_snapshot op: %s", snap)
	}
	if st, err := os.Stat(state + "/" + between(snap, `"vm_snapshot": "`, `"`) + ".vmstate"); err != nil || st.Size() == 0 {
		t.Errorf("vm snapshot file: %v, %v", st, err)
	}

	stopped := strings.Replace(applianceSpec, `runtime = "qemu"`, "runtime = \"qemu\"\n  state = \"stopped\"", 1)
	runGatewayCLI(t, f, gwURL, "apply", writeSpec(t, stopped))
	eventually(t, "vmbox stopped and unplaced", func() bool {
		st := getDevBox(t, a, "vmbox")
		return st.Placement == nil && st.Observed != nil && st.Observed.Phase == wire.PhaseStopped
	})
}
