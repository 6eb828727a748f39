package probe

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/allox-os/allox/internal/rpc"
	"github.com/allox-os/allox/internal/vm"
)

// vmRecord is the QEMU runtime's record of a sandbox in the Probe's state directory.
type vmRecord struct {
	Pid       int    `json:"pid"`
	QMP       string `json:"qmp"`
	HostPort  int    `json:"host_port"`
	GuestPort int    `json:"guest_port"`
	TokenFile string `json:"token_file"`
	BootID    string `json:"boot_id"`
}

func readVMRecord(t testing.TB, state, devbox string) vmRecord {
	t.Helper()
	var rec vmRecord
	b, err := os.ReadFile(filepath.Join(state, "sandbox-"+devbox+".json"))
	if err == nil {
		err = json.Unmarshal(b, &rec)
	}
	if err != nil {
		t.Fatalf("the VM's record: %v", err)
	}
	return rec
}

func (r vmRecord) client(t testing.TB) *rpc.Client {
	tok, err := os.ReadFile(r.TokenFile)
	if err != nil {
		t.Fatal(err)
	}
	return rpc.NewClient(fmt.Sprintf("http://127.0.0.1:%d", r.HostPort), strings.TrimSpace(string(tok)), nil)
}

// hmp runs a human monitor command on the VM's QMP socket, as an operator (or a fault) would.
func hmp(t testing.TB, socket, command string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	raw, err := vm.QMPCommand(ctx, socket, "human-monitor-command", map[string]string{"command-line": command})
	if err != nil {
		t.Fatalf("hmp %s: %v", command, err)
	}
	var out string
	json.Unmarshal(raw, &out)
	return out
}

func sshRun(t *testing.T, f *fleet, gwURL, sshAddr, cmd string) string {
	t.Helper()
	c := sshLogin(t, f, gwURL, sshAddr, "vmbox", "s1", "main+s1")
	defer c.Close()
	s, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	out, err := s.CombinedOutput(cmd)
	if err != nil {
		t.Fatalf("ssh %q: %v %s", cmd, err, out)
	}
	return string(out)
}

var adoptedRE = regexp.MustCompile(`adopted its running VM \(pid (\d+)\)`)

// The Worker Sandbox lifecycle on the real appliance under QEMU, across faults:
//   - a boot that fails (QEMU exits at once: its store disk is a directory) is retried with
//     backoff and recovers once the cause is gone;
//   - the Probe killed with SIGKILL and restarted: the running VM is adopted (same pid, same
//     boot id, a file written in the session still there), not rebooted, and only under the new
//     epoch the restarted Probe is granted;
//   - the forward to the appliance's host listener removed (listener_lost): rebound on its port;
//   - the forward moved to another port (endpoint_stale): the Bridge and the SSH channel follow;
//   - the Gateway gone past stop_after: the adopted VM's session is fenced like any other.
func TestQEMUSandboxAdoptedAfterProbeRestart(t *testing.T) {
	out, f, gwURL, gw := vmFleet(t)
	state := shortDir(t)
	t.Cleanup(func() { killSandboxes(state) }) // QEMU outlives the Probe by design
	h := &probeHost{name: "vmhost", state: state, args: []string{"serve", "--gateway", gwURL, "--host", "vmhost", "--pki", f.pki, "--state", state,
		"--slots", "1", "--appliance", out, "--supervise-every", "200ms", "--ssh-listen", "127.0.0.1:0", "--ssh-user-ca", f.pki + "/ssh-ca.pub",
		"--heal-attempts", "6", "--heal-backoff", "1s", "--heal-max-backoff", "2s"}}
	disk := filepath.Join(state, "workspace-vmbox.img")
	if err := os.Mkdir(disk, 0o700); err != nil { // QEMU cannot open a directory as a disk
		t.Fatal(err)
	}
	f.restart(h)
	a := f.admin(gwURL)
	runGatewayCLI(t, f, gwURL, "apply", writeSpec(t, applianceSpec))

	// A failed boot, retried.
	eventually(t, "a boot retry failed", func() bool { return probeStatus(t, h).Heal["boot_failed retrying"] >= 1 })
	if err := os.Remove(disk); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(vm.Scaled(3 * time.Minute))
	for !running(t, a, "vmbox", "vmhost")() {
		if time.Now().After(deadline) {
			t.Fatalf("vmbox not running under QEMU after its boot was retried (accel %s): %+v", vm.Accel(), probeStatus(t, h).Heal)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if c := probeStatus(t, h).Heal; c["boot_failed recovered"] != 1 {
		t.Errorf("self-heal counters %v: want the failed boot recovered once", c)
	}
	sshAddr := h.p.find(t, sshRE)
	sshRun(t, f, gwURL, sshAddr, "echo written-before-the-restart > kept.txt")
	rec1 := readVMRecord(t, state, "vmbox")
	epoch1 := getDevBox(t, a, "vmbox").Placement.Epoch

	// The Probe killed and restarted: the VM is adopted.
	h.p.kill()
	if err := syscall.Kill(rec1.Pid, 0); err != nil {
		t.Fatalf("QEMU (pid %d) died with the Probe: %v", rec1.Pid, err)
	}
	f.restart(h)
	eventually(t, "vmbox running under a new epoch", func() bool {
		return running(t, a, "vmbox", "vmhost")() && getDevBox(t, a, "vmbox").Placement.Epoch > epoch1
	})
	if got := h.p.find(t, adoptedRE); got != fmt.Sprint(rec1.Pid) {
		t.Errorf("the restarted Probe adopted pid %s, want %d", got, rec1.Pid)
	}
	rec2 := readVMRecord(t, state, "vmbox")
	var si rpc.SystemInfo
	if err := rec2.client(t).Call(t.Context(), rpc.ActionSystemInfo, nil, &si); err != nil || si.BootID != rec1.BootID || rec2.Pid != rec1.Pid {
		t.Errorf("after the restart: pid %d (was %d), boot id %q (was %q), %v; want the same VM, not rebooted", rec2.Pid, rec1.Pid, si.BootID, rec1.BootID, err)
	}
	sshAddr = h.p.find(t, sshRE)
	if got := sshRun(t, f, gwURL, sshAddr, "cat kept.txt"); got != "written-before-the-restart\n" {
		t.Errorf("the session's file after the adoption: %q", got)
	}
	audit := runGatewayCLI(t, f, gwURL, "audit", "--limit", "1000")
	if strings.Count(audit, `"action": "register"`) != 2 || !strings.Contains(audit, `"action": "reissue"`) {
		t.Errorf("audit does not show two registrations and the reissue under the new epoch:\n%s", audit)
	}
	if c := probeStatus(t, h).Heal; c["sandbox_exited recovered"] != 0 || c["boot_failed recovered"] != 0 {
		t.Errorf("self-heal counters of the restarted Probe %v: it restarted or booted the VM instead of adopting it", c)
	}

	// listener_lost: the forward to the host listener is gone; rebound on the same port.
	rule := fmt.Sprintf("tcp:127.0.0.1:%d", rec2.HostPort)
	if o := hmp(t, rec2.QMP, "hostfwd_remove net0 "+rule); !strings.Contains(o, "removed") {
		t.Fatalf("hostfwd_remove: %q", o)
	}
	eventually(t, "the forward rebound", func() bool { return probeStatus(t, h).Heal["listener_lost recovered"] == 1 })
	if err := rec2.client(t).Call(t.Context(), rpc.ActionSystemInfo, nil, &si); err != nil {
		t.Errorf("the host listener on its port after the rebind: %v", err)
	}

	// endpoint_stale: the forward now on another port; the Bridge and the channel follow it.
	port2 := freeTCPPort(t)
	hmp(t, rec2.QMP, fmt.Sprintf("hostfwd_add net0 tcp:127.0.0.1:%d-:%d", port2, rec2.GuestPort))
	hmp(t, rec2.QMP, "hostfwd_remove net0 "+rule)
	eventually(t, "the endpoint refreshed", func() bool { return probeStatus(t, h).Heal["endpoint_stale recovered"] == 1 })
	if rec3 := readVMRecord(t, state, "vmbox"); rec3.HostPort != port2 {
		t.Errorf("the record's host port %d after the refresh, want %d", rec3.HostPort, port2)
	}
	if got := sshRun(t, f, gwURL, sshAddr, "cat kept.txt"); got != "written-before-the-restart\n" {
		t.Errorf("ssh after the refresh: %q", got)
	}
	eventually(t, "vmbox running after the refresh", running(t, a, "vmbox", "vmhost"))

	// The adopted VM is under the lease like any other: the Gateway gone, its session is fenced.
	gw.kill()
	rec3 := readVMRecord(t, state, "vmbox")
	eventually(t, "the adopted VM's session fenced", func() bool {
		var s rpc.Session
		err := rec3.client(t).Call(t.Context(), rpc.ActionSessionGet, map[string]string{"agent_id": "main", "session_id": "s1"}, &s)
		return err == nil && s.Fenced != nil && strings.HasPrefix(s.Fenced.Reason, "probe: ")
	})
}

func freeTCPPort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
