package probe

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/allox-os/allox/deploy/probe/internal/wire"
	"github.com/allox-os/allox/internal/btrfstest"
	"github.com/allox-os/allox/internal/rpc"
)

const alphaSpec = `
devbox "alpha" {
  runtime = "process"
  agent   = "main"
  session "s1" {}
}
`

// lastSeen is the DevBox status the last wait saw, for the failure message.
var lastSeen wire.DevBoxStatus

func writeSpec(t testing.TB, src string) string {
	p := filepath.Join(t.TempDir(), "fleet.hcl")
	if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func session(t testing.TB, endpoint, token, sess string) (rpc.Session, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var s rpc.Session
	err := rpc.NewClient(endpoint, token, nil).Call(ctx, rpc.ActionSessionGet, map[string]string{"agent_id": "main", "session_id": sess}, &s)
	return s, err
}

func running(t testing.TB, a *wire.AdminClient, name, host string) func() bool {
	return func() bool {
		st := getDevBox(t, a, name)
		lastSeen = st
		return st.Placement != nil && st.Placement.Host == host && st.Observed != nil && st.Observed.Host == host &&
			st.Observed.Epoch == st.Placement.Epoch && st.Observed.Phase == wire.PhaseRunning && st.Observed.Sessions["s1"] == wire.PhaseRunning
	}
}

// A Probe cut off from its Gateway past stop_after fences its appliance's sessions (seen through
// the appliance's own session.get) before the Gateway may reassign; the Gateway reassigns only
// after lost_after, and the cut-off Probe's sessions stay fenced after it comes back.
func TestChaosPartitionFencesBeforeReassign(t *testing.T) {
	needBtrfs(t)
	store := btrfstest.Mount(t)
	f := newFleet(t)
	gwURL, _, _ := f.gateway("a", "")
	px := newProxy(t, strings.TrimPrefix(gwURL, "https://"))
	hostA := f.probe("host-a", px.URL(), store, 2)
	a := f.admin(gwURL)
	runGatewayCLI(t, f, gwURL, "apply", "--reason", "chaos", writeSpec(t, alphaSpec))
	eventually(t, "alpha running on host-a", running(t, a, "alpha", "host-a"))
	epochA := getDevBox(t, a, "alpha").Placement.Epoch
	endpoint, token, _ := hostA.sandbox(t, "alpha")
	if s, err := session(t, endpoint, token, "s1"); err != nil || s.Fenced != nil {
		t.Fatalf("before the partition: %+v, %v; want an unfenced session", s, err)
	}
	hostB := f.probe("host-b", gwURL, store, 1)

	px.partition(true)
	cut := time.Now()
	eventually(t, "host-a fences s1", func() bool {
		s, err := session(t, endpoint, token, "s1")
		return err == nil && s.Fenced != nil
	})
	fencedAfter := time.Since(cut)
	s, _ := session(t, endpoint, token, "s1")
	if !strings.HasPrefix(s.Fenced.Reason, "probe: lease") {
		t.Errorf("fence reason %q, want the probe's lease fence", s.Fenced.Reason)
	}
	st := getDevBox(t, a, "alpha")
	if st.Placement.Host != "host-a" {
		t.Fatalf("alpha was reassigned to %s before host-a fenced (fenced %v after the cut)", st.Placement.Host, fencedAfter)
	}
	// A fenced session refuses state changes on the appliance itself.
	err := rpc.NewClient(endpoint, token, nil).Call(t.Context(), rpc.ActionCheckpointCreate, map[string]any{"agent_id": "main", "session_id": "s1"}, nil)
	if err == nil {
		t.Error("checkpoint.create on the fenced session succeeded")
	}

	eventually(t, "alpha reassigned to host-b", running(t, a, "alpha", "host-b"))
	if moved := time.Since(cut); moved < lostAfter-250*time.Millisecond {
		t.Errorf("reassigned %v after the cut, before lost_after %v", moved, lostAfter)
	}
	endpointB, tokenB, _ := hostB.sandbox(t, "alpha")
	if s, err := session(t, endpointB, tokenB, "s1"); err != nil || s.Fenced != nil {
		t.Errorf("alpha on host-b: %+v, %v; want an unfenced session", s, err)
	}

	px.partition(false)
	eventually(t, "host-a registers again", func() bool {
		var ls []wire.LeaseStatus
		a.Do(t.Context(), "GET", wire.PathLeases, nil, &ls)
		for _, l := range ls {
			if l.Host == "host-a" && l.Epoch > epochA {
				return true
			}
		}
		return false
	})
	time.Sleep(time.Second) // a few supervision passes of host-a under its new epoch
	if s, err := session(t, endpoint, token, "s1"); err != nil || s.Fenced == nil {
		t.Errorf("host-a's alpha after it came back: %+v, %v; want still fenced (alpha now runs on host-b)", s, err)
	}
}

// A Probe killed and restarted registers again with a new epoch, adopts its running sandbox, and
// runs the DevBox under the new epoch only.
func TestChaosProbeRestartGetsNewEpoch(t *testing.T) {
	f, gwURL, h, a := alphaRunning(t, 2)
	epoch1 := getDevBox(t, a, "alpha").Placement.Epoch
	_, _, pid1 := h.sandbox(t, "alpha")

	h.p.kill()
	f.restart(h)
	eventually(t, "alpha running under a new epoch", func() bool {
		return running(t, a, "alpha", "host-a")() && getDevBox(t, a, "alpha").Placement.Epoch > epoch1
	})
	endpoint, token, pid2 := h.sandbox(t, "alpha")
	if pid2 != pid1 {
		t.Errorf("the restarted probe booted a second sandbox (pid %d, was %d); want the running one adopted", pid2, pid1)
	}
	if s, err := session(t, endpoint, token, "s1"); err != nil || s.Fenced != nil {
		t.Errorf("s1 after the restart: %+v, %v; want unfenced", s, err)
	}
	out := runGatewayCLI(t, f, gwURL, "audit", "--limit", "1000")
	if strings.Count(out, `"action": "register"`) != 2 || !strings.Contains(out, `"action": "reissue"`) {
		t.Errorf("audit does not show two registrations and the reissue:\n%s", out)
	}
}

// Checkpoint and rollback of a session through the Gateway: the op travels Gateway → Probe →
// appliance, and a rollback needs an approval reference.
func TestCheckpointRollbackThroughGateway(t *testing.T) {
	f, gwURL, h, _ := alphaRunning(t, 1)
	endpoint, token, _ := h.sandbox(t, "alpha")
	s, err := session(t, endpoint, token, "s1")
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(s.Current, "work.txt")
	if err := os.WriteFile(file, []byte("good\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := runGatewayCLI(t, f, gwURL, "op", "--session", "s1", "--wait", "30s", "checkpoint", "alpha")
	id := between(out, `"checkpoint_id": "`, `"`)
	if id == "" {
		t.Fatalf("checkpoint op printed no checkpoint id:\n%s", out)
	}
	os.WriteFile(file, []byte("bad\n"), 0o644)
	cmd := runGatewayCLIErr(t, f, gwURL, "op", "--session", "s1", "--checkpoint", id, "rollback", "alpha")
	if !strings.Contains(cmd, "approval") {
		t.Errorf("rollback without approval: %s, want refused naming the approval", cmd)
	}
	runGatewayCLI(t, f, gwURL, "op", "--session", "s1", "--checkpoint", id, "--approval", "CHG-42", "--reason", "bad edit", "--wait", "30s", "rollback", "alpha")
	if b, _ := os.ReadFile(file); string(b) != "good\n" {
		t.Errorf("after the rollback work.txt = %q, want the checkpoint's %q", b, "good\n")
	}
	audit := runGatewayCLI(t, f, gwURL, "audit", "--limit", "1000")
	if !strings.Contains(audit, `"approval": "CHG-42"`) || strings.Contains(audit, "good") {
		t.Errorf("audit: want the rollback's approval and no workspace content:\n%s", audit)
	}
}

func runGatewayCLIErr(t *testing.T, f *fleet, url string, args ...string) string {
	t.Helper()
	out, err := execGateway(f, url, args...)
	if err == nil {
		t.Fatalf("gateway %v succeeded, want a refusal:\n%s", args, out)
	}
	return out
}

func between(s, from, to string) string {
	_, after, ok := strings.Cut(s, from)
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(after, to)
	return v
}

// `gateway apply` reports a bad spec with its file and line and writes nothing.
func TestGatewayApplyDiagnostics(t *testing.T) {
	f := newFleet(t)
	gwURL, _, _ := f.gateway("a", "")
	path := writeSpec(t, "devbox \"alpha\" {\n  agent = \"main\"\n  runtime = \"docker\"\n}\n")
	out := runGatewayCLIErr(t, f, gwURL, "apply", path)
	if want := path + `:3,3: Invalid runtime; devbox "alpha": runtime = "docker"; use one of qemu, process.`; !strings.Contains(out, want) {
		t.Errorf("apply output:\n%s\nwant %q", out, want)
	}
	if list := runGatewayCLI(t, f, gwURL, "list"); strings.TrimSpace(list) != "[]" {
		t.Errorf("after a refused apply, list = %s, want []", list)
	}
}

// alphaRunning starts a Gateway and a Probe (host-a, slots) with the process runtime on a real
// Btrfs store, applies alphaSpec and waits until alpha runs there.
func alphaRunning(t *testing.T, slots int) (*fleet, string, *probeHost, *wire.AdminClient) {
	t.Helper()
	needBtrfs(t)
	store := btrfstest.Mount(t)
	f := newFleet(t)
	gwURL, _, _ := f.gateway("a", "")
	h := f.probe("host-a", gwURL, store, slots)
	a := f.admin(gwURL)
	runGatewayCLI(t, f, gwURL, "apply", writeSpec(t, alphaSpec))
	eventually(t, "alpha running", running(t, a, "alpha", "host-a"))
	return f, gwURL, h, a
}
