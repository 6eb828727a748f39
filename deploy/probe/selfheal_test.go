package probe

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/allox-os/allox/deploy/probe/internal/wire"
	"github.com/allox-os/allox/internal/btrfstest"
	"github.com/allox-os/allox/internal/rpc"
)

func probeStatus(t testing.TB, h *probeHost) (st struct {
	Heal map[string]int `json:"self_heal"`
}) {
	b, err := exec.Command(bins(t)["probe"], "status", "--state", h.state).Output()
	if err == nil {
		json.Unmarshal(b, &st)
	}
	return st
}

// On the real sandbox: a daemon that dies (sandbox_exited, on the allow-list) is restarted on
// the same store and counted; a session deleted behind the Probe's back (outside the allow-list)
// is never re-created: the DevBox is reported degraded and the fault escalated to the Gateway.
func TestSelfHealOnRealSandbox(t *testing.T) {
	f, gwURL, h, a := alphaRunning(t, 1)
	_, _, pid := h.sandbox(t, "alpha")

	syscall.Kill(pid, syscall.SIGKILL)
	eventually(t, "the sandbox restarted", func() bool { return probeStatus(t, h).Heal["sandbox_exited recovered"] == 1 })
	endpoint, token, pid2 := h.sandbox(t, "alpha")
	if pid2 == pid {
		t.Fatal("the sandbox's pid did not change")
	}
	if s, err := session(t, endpoint, token, "s1"); err != nil || s.Fenced != nil {
		t.Errorf("s1 after the restart: %+v, %v; want it back, unfenced, from the same store", s, err)
	}
	eventually(t, "alpha running again", running(t, a, "alpha", "host-a"))

	err := rpc.NewClient(endpoint, token, nil).Call(t.Context(), rpc.ActionSessionDelete, map[string]string{"agent_id": "main", "session_id": "s1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "alpha degraded", func() bool {
		st := getDevBox(t, a, "alpha")
		return st.Observed != nil && st.Observed.Phase == wire.PhaseDegraded && st.Observed.Sessions["s1"] == wire.PhaseDegraded
	})
	time.Sleep(time.Second) // ten supervision passes
	audit := runGatewayCLI(t, f, gwURL, "audit", "--limit", "1000")
	if n := strings.Count(audit, `"action": "escalation"`); n != 1 || !strings.Contains(audit, "session_missing") {
		t.Errorf("%d escalations in the audit, want one, of session_missing (not one per supervision pass):\n%s", n, audit)
	}
	if _, err := session(t, endpoint, token, "s1"); err == nil {
		t.Error("the Probe re-created a session it was not told to: self-heal went beyond its allow-list")
	}
	if c := probeStatus(t, h).Heal; c["session_missing degraded"] == 0 {
		t.Errorf("self-heal counters %v: want session_missing counted as degraded", c)
	}
}

// bootBlocked starts a Gateway and a Probe with the process runtime whose store path for alpha
// is a regular file, so that every boot of alpha fails before a daemon starts, and applies alpha.
func bootBlocked(t *testing.T, heal ...string) (f *fleet, gwURL string, h *probeHost, a *wire.AdminClient, blocker string) {
	t.Helper()
	needBtrfs(t)
	store := btrfstest.Mount(t)
	f = newFleet(t)
	gwURL, _, _ = f.gateway("a", "")
	blocker = filepath.Join(store, "host-a", "alpha")
	os.MkdirAll(filepath.Dir(blocker), 0o755)
	if err := os.WriteFile(blocker, []byte("not a store directory\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	h = f.probe("host-a", gwURL, store, 1, heal...)
	a = f.admin(gwURL)
	runGatewayCLI(t, f, gwURL, "apply", writeSpec(t, alphaSpec))
	return f, gwURL, h, a, blocker
}

// A failed boot is retried by self-heal (boot_failed → restart) with backoff, and recovers once
// the cause is gone: the DevBox runs, its session answers, and the retries are counted.
func TestSelfHealFailedBootRetried(t *testing.T) {
	_, _, h, a, blocker := bootBlocked(t, "--heal-attempts", "5", "--heal-backoff", "1s", "--heal-max-backoff", "2s")
	eventually(t, "a boot retry failed", func() bool { return probeStatus(t, h).Heal["boot_failed retrying"] >= 1 })
	if err := os.Remove(blocker); err != nil {
		t.Fatal(err)
	}
	eventually(t, "alpha running after a retried boot", running(t, a, "alpha", "host-a"))
	c := probeStatus(t, h).Heal
	if c["boot_failed recovered"] != 1 || c["boot_failed escalated"] != 0 {
		t.Errorf("self-heal counters %v: want boot_failed retried, then recovered once, never escalated", c)
	}
	endpoint, token, _ := h.sandbox(t, "alpha")
	if s, err := session(t, endpoint, token, "s1"); err != nil || s.Fenced != nil {
		t.Errorf("s1 after the retried boot: %+v, %v; want it created and unfenced", s, err)
	}
}

// A boot that keeps failing is retried MaxAttempts times with backoff, then escalated once to the
// Gateway and reported degraded; it is never retried after that, and the Gateway keeps its
// placement (the Probe does not give the DevBox up on its own).
func TestSelfHealFailedBootEscalates(t *testing.T) {
	f, gwURL, h, a, _ := bootBlocked(t, "--heal-attempts", "3", "--heal-backoff", "100ms", "--heal-max-backoff", "200ms")
	eventually(t, "alpha degraded", func() bool {
		st := getDevBox(t, a, "alpha")
		return st.Observed != nil && st.Observed.Phase == wire.PhaseDegraded
	})
	time.Sleep(time.Second) // ten supervision passes, five times the longest backoff
	c := probeStatus(t, h).Heal
	if c["boot_failed retrying"] != 2 || c["boot_failed escalated"] != 1 || c["boot_failed recovered"] != 0 {
		t.Errorf("self-heal counters %v: want 2 retries, then one escalation, nothing after", c)
	}
	audit := runGatewayCLI(t, f, gwURL, "audit", "--limit", "1000")
	if n := strings.Count(audit, `"action": "escalation"`); n != 1 || !strings.Contains(audit, "boot_failed") {
		t.Errorf("%d escalations in the audit, want one, of boot_failed:\n%s", n, audit)
	}
	if st := getDevBox(t, a, "alpha"); st.Placement == nil || st.Placement.Host != "host-a" {
		t.Errorf("alpha's placement after the escalation: %+v; the Gateway decides, the Probe never unplaces", st.Placement)
	}
}
