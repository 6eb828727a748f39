package probe

import (
	"encoding/json"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/allox-os/allox/deploy/probe/internal/wire"
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
