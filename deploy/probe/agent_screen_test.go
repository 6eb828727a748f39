package probe

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/allox-os/allox/deploy/probe/internal/agent"
	"github.com/allox-os/allox/deploy/probe/internal/probe"
	"github.com/allox-os/allox/deploy/probe/internal/scriptedmodel"
	"github.com/allox-os/allox/deploy/probe/internal/wire"
	"github.com/allox-os/allox/internal/rpc"
	"github.com/allox-os/allox/internal/vm"
)

// codex's approvals through the dialog, on the real appliance, one boot. Through its
// PermissionRequest hook (the default): the request goes up with the in-sandbox client (`allox
// dialog hook codex`, the appliance's dialog plugin) and the answer given on the host listener
// (dialog.answer, what the Probe's Dialog Forwarder delivers from the Gateway) is the hook's
// decision; codex shows no prompt. Through its screen (ScreenApproval, the fallback for a codex
// that shows its prompt anyway): the prompt is read off the screen, asked with `allox dialog
// ask`, and the answer typed as keys. Allowed, the command runs and the file is in the
// workspace; denied, it does not. Either way the turn ends, the adapter leaves codex and the
// task is done.
func TestCodexApprovalInAppliance(t *testing.T) {
	out := agentsAppliance(t)
	_, port := serveModel(t, scriptedmodel.Script{Command: "echo made-by-the-agent > result.txt", Final: "The file is written.", Escalate: true})
	ctx := t.Context()
	br, client := bootAgents(t, out, port)
	for _, tc := range []struct {
		session, choice string
		screen, want    bool
	}{{"hook-allowed", "allow", false, true}, {"hook-denied", "deny", false, false},
		{"screen-allowed", "allow", true, true}, {"screen-denied", "deny", true, false}} {
		t.Run(tc.session, func(t *testing.T) {
			if _, err := br.EnsureSession(ctx, "main", tc.session); err != nil {
				t.Fatal(err)
			}
			task := agent.Task{Prompt: "write result.txt", ModelURL: fmt.Sprintf("http://%s:%d", vm.GuestFwdAddr, modelPort), APIKey: "sk-scripted",
				Model: "scripted", Dialog: true, ScreenApproval: tc.screen}
			events := &eventLog{}
			actx, cancel := context.WithCancel(ctx)
			defer cancel()
			a := agent.Start(actx, agent.Config{Client: client, DevBox: "agents", Agent: "main", Session: tc.session, CLI: agent.CLIs["codex"], Task: task,
				Restart: probe.HealPolicy{MaxAttempts: 0, Backoff: time.Second, MaxBackoff: time.Second}, Emit: events.add,
				Approvals: func() int { return openIn(client, tc.session) }})
			req := pendingOf(t, client, tc.session, a)
			// the hook's deny shows as codex's "Blocked by hook"; its allow shows no mark of its own
			source, prompts, mark := "codex PermissionRequest", 0, "Blocked by hook"
			if tc.screen {
				source, prompts, mark = "codex terminal prompt", 1, map[bool]string{true: "You approved codex", false: "You canceled the request"}[tc.want]
			}
			if !strings.Contains(req.Prompt, "echo made-by-the-agent > result.txt") || req.Source != source || req.Default != "deny" {
				t.Errorf("the dialog's request: %+v, want the command, source %s, default deny", req, source)
			}
			waitStatus(t, a, wire.AgentApproval)
			if got := runIn(t, client, tc.session, "/bin/cat", "result.txt"); strings.Contains(got, "made-by-the-agent") {
				t.Fatalf("the command ran before it was answered")
			}
			if !tc.screen && agent.CLIs["codex"].Approval.MatchString(a.Screen()) {
				t.Errorf("with its hook asking, codex shows its own prompt too:\n%s", a.Screen())
			}
			if err := client.Call(ctx, "dialog.answer", map[string]any{"request_id": req.RequestID, "choice": tc.choice, "by": "test"}, nil); err != nil {
				t.Fatalf("dialog.answer: %v", err)
			}
			waitDone(t, a) // the turn over, the adapter leaves codex (/quit): its run ends
			marked := strings.Contains(a.Screen(), mark)
			if st, _, runs := a.State(); st != wire.AgentDone || len(runs) != 1 || marked != (tc.screen || !tc.want) {
				t.Errorf("after the answer %s: adapter %s (%s), runs %v, want done, %q on the screen %v:\n%s", tc.choice, st, a.Reason(), runs, mark, !marked, a.Screen())
			}
			if got := events.statuses(tc.session); !strings.Contains(got, wire.AgentApproval) || !strings.HasSuffix(got, wire.AgentDone) {
				t.Errorf("the session's status events %q: want %s ... %s", got, wire.AgentApproval, wire.AgentDone)
			}
			got := runIn(t, client, tc.session, "/bin/cat", "result.txt")
			if ran := strings.Contains(got, "made-by-the-agent"); ran != tc.want {
				t.Errorf("answered %s: result.txt %q (the command ran: %v); screen:\n%s", tc.choice, got, ran, a.Screen())
			}
			if n := a.ScreenPrompts(); n != prompts {
				t.Errorf("%d screen prompts went to the dialog, want %d", n, prompts)
			}
		})
	}
}

// openIn counts the session's open dialog requests, as the Dialog Forwarder's Open does.
func openIn(c *rpc.Client, session string) int {
	var res struct {
		Requests []pendingRequest `json:"requests"`
	}
	if err := c.Call(context.Background(), "dialog.pending", nil, &res); err != nil {
		return 0
	}
	n := 0
	for _, r := range res.Requests {
		if r.SessionID == session {
			n++
		}
	}
	return n
}

// waitStatus waits for the adapter's status to be st.
func waitStatus(t *testing.T, a *agent.Adapter, st string) {
	t.Helper()
	deadline := time.Now().Add(vm.Scaled(30 * time.Second))
	for {
		got, _, _ := a.State()
		if got == st {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("while the request is open the adapter is %s (%s), want %s", got, a.Reason(), st)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

type pendingRequest struct {
	RequestID string `json:"request_id"`
	SessionID string `json:"session_id"`
	Prompt    string `json:"prompt"`
	Default   string `json:"default"`
	Source    string `json:"source"`
}

// pendingOf waits for the session's open dialog request, as the Dialog Forwarder does.
func pendingOf(t *testing.T, c *rpc.Client, session string, a *agent.Adapter) pendingRequest {
	t.Helper()
	deadline := time.Now().Add(vm.Scaled(3 * time.Minute))
	for time.Now().Before(deadline) {
		var res struct {
			Requests []pendingRequest `json:"requests"`
		}
		if err := c.Call(t.Context(), "dialog.pending", map[string]any{"wait": 5}, &res); err != nil {
			t.Fatalf("dialog.pending: %v", err)
		}
		for _, r := range res.Requests {
			if r.SessionID == session {
				return r
			}
		}
		select {
		case <-a.Done():
			st, _, _ := a.State()
			t.Fatalf("the adapter ended %s (%s) before asking; screen:\n%s", st, a.Reason(), a.Screen())
		default:
		}
	}
	st, _, _ := a.State()
	t.Fatalf("no dialog request of session %s: adapter %s (%s); screen:\n%s", session, st, a.Reason(), a.Screen())
	return pendingRequest{}
}
