package probe

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/allox-os/allox/internal/artifact"
	"github.com/allox-os/allox/internal/testenv"
	"github.com/allox-os/allox/internal/vm"
)

// The dialog relay end to end with the real appliance under QEMU (out/dialog: the dialog plugin
// in the guest's daemon): a run of the session, started over ssh_remote, asks with `allox dialog
// ask`; the question goes up through the Probe to the Gateway; a person answers with `gateway
// dialog answer`; the asking process prints the answer. Then a question nobody answers takes its
// default, and the answer after it is refused as late. The content — a random prompt and a
// random option, given on stdin so that no command line holds them — is nowhere in the etcd data,
// the audit, the Probe's state directory (the guest's store disk included) or the processes' logs.
func TestDialogApplianceEndToEnd(t *testing.T) {
	out := filepath.Join(testenv.Out(), "dialog")
	testenv.NeedOut(t, "dialog/"+artifact.Boot, "dialog/"+artifact.Kernel, "dialog/"+artifact.Rootfs)
	testenv.Tool(t, "qemu-system-x86_64", "apt-get install qemu-system-x86")
	f := newFleet(t)
	if o, err := execCmd(bins(t)["gateway"], "ca", "ssh-init", "--dir", f.pki); err != nil {
		t.Fatalf("gateway ca ssh-init: %v %s", err, o)
	}
	gwURL, _, gw := f.gateway("a", "", "--renew-every", "1s", "--stop-after", "8s", "--lost-after", "12s")
	if err := f.ca.IssueFiles(f.pki, "vmhost", "vmhost", "probe"); err != nil {
		t.Fatal(err)
	}
	state := shortDir(t)
	t.Cleanup(func() { killHolding(state) }) // a killed Probe's VMs outlive it
	probeProc := start(t, "vmhost", bins(t)["probe"], "serve", "--gateway", gwURL, "--host", "vmhost", "--pki", f.pki, "--state", state,
		"--slots", "1", "--appliance", out, "--supervise-every", "200ms", "--dialog",
		"--ssh-listen", "127.0.0.1:0", "--ssh-user-ca", f.pki+"/ssh-ca.pub")
	sshAddr := probeProc.find(t, sshRE)
	a := f.admin(gwURL)
	runGatewayCLI(t, f, gwURL, "apply", writeSpec(t, applianceSpec))
	deadline := time.Now().Add(vm.Scaled(3 * time.Minute))
	for !running(t, a, "vmbox", "vmhost")() {
		if time.Now().After(deadline) {
			t.Fatalf("vmbox not running under QEMU (accel %s)", vm.Accel())
		}
		time.Sleep(100 * time.Millisecond)
	}
	c := sshLogin(t, f, gwURL, sshAddr, "vmbox", "s1", "main+s1")
	defer c.Close()
	asked := func(stdin, flags string) chan string {
		done := make(chan string, 2)
		s, err := c.NewSession()
		if err != nil {
			t.Fatal(err)
		}
		s.Stdin = strings.NewReader(stdin)
		go func() {
			o, err := s.Output(`read -r opt; /run/allox/bin/allox dialog ask --option "$opt" --option no --default no ` + flags + ` -`)
			if err != nil {
				o = append(o, []byte(" (error: "+err.Error()+")")...)
			}
			done <- string(o)
		}()
		return done
	}

	prompt, choice := marker(t, "prompt"), marker(t, "choice")
	got := asked(choice+"\n"+prompt, "--timeout 300")
	listed := make(chan struct{})
	go func() { // an asking process that ends before it is listed says why
		select {
		case o := <-got:
			t.Errorf("the asking process ended before its request was listed: %q", o)
			got <- o
		case <-listed:
		}
	}()
	it := waitItem(t, f, gwURL, prompt)
	close(listed)
	if it.DevBox != "vmbox" || it.Session != "s1" || it.Host != "vmhost" || it.PromptBytes != len(prompt) {
		t.Fatalf("the listed request %+v", it.DialogRecord)
	}
	if o, err := answerCLI(f, gwURL, "vmbox", "s1", it.RequestID, choice); err != nil || !strings.Contains(o, `"outcome": "answered"`) {
		t.Fatalf("gateway dialog answer: %v %s", err, o)
	}
	select {
	case o := <-got:
		if o != choice+"\n" {
			t.Fatalf("the asking process in the guest printed %q, want the person's answer", o)
		}
	case <-time.After(vm.Scaled(60 * time.Second)):
		t.Fatal("the asking process in the guest got no answer")
	}

	prompt2 := marker(t, "prompt")
	got2 := asked("unused\n"+prompt2, "--timeout 5")
	it2 := waitItem(t, f, gwURL, prompt2)
	select {
	case o := <-got2:
		if o != "no\n" {
			t.Fatalf("the unanswered question in the guest gave %q, want its default", o)
		}
	case <-time.After(vm.Scaled(60 * time.Second)):
		t.Fatal("the unanswered question did not time out")
	}
	if o, err := answerCLI(f, gwURL, "vmbox", "s1", it2.RequestID, "no"); err == nil || !strings.Contains(o, "recorded as late") {
		t.Fatalf("a late answer: %v %s, want it refused as late", err, o)
	}
	eventually(t, "both outcomes recorded", func() bool {
		return itemOf(t, f, gwURL, it.RequestID).Outcome == "answered" && itemOf(t, f, gwURL, it2.RequestID).Outcome == "default"
	})
	audit := runGatewayCLI(t, f, gwURL, "audit", "--limit", "1000")
	c.Close()
	stopped := strings.Replace(applianceSpec, `runtime = "qemu"`, "runtime = \"qemu\"\n  state = \"stopped\"", 1)
	runGatewayCLI(t, f, gwURL, "apply", writeSpec(t, stopped))
	eventually(t, "vmbox stopped", func() bool {
		st := getDevBox(t, a, "vmbox")
		return st.Placement == nil && st.Observed != nil && st.Observed.Phase == "stopped"
	})
	gw.kill()
	probeProc.kill()
	assertNowhere(t, []string{prompt, prompt2, choice}, map[string][]byte{"audit": []byte(audit), "gateway log": logOf(gw), "probe log": logOf(probeProc)},
		f.etcdData[0], state)
}

// killHolding kills the processes whose command line names dir (the QEMU processes of a Probe's
// state directory).
func killHolding(dir string) {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil || !strings.Contains(string(b), dir+"/") {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p))); err == nil && pid != os.Getpid() {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}
