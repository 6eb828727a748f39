package probe

import (
	"encoding/json"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/pkg/sftp"

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
