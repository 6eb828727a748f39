package probe

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/allox-os/allox/deploy/probe/internal/agent"
	"github.com/allox-os/allox/deploy/probe/internal/probe"
	"github.com/allox-os/allox/deploy/probe/internal/scriptedmodel"
	"github.com/allox-os/allox/deploy/probe/internal/spec"
	"github.com/allox-os/allox/deploy/probe/internal/wire"
	"github.com/allox-os/allox/internal/rpc"
	"github.com/allox-os/allox/internal/vm"
)

// codex has no hook the adapter uses: in its interactive TUI asking on request, its approval
// prompt is read off the screen, asked with the dialog client in the session's sandbox (`allox
// dialog ask`, the appliance's dialog plugin), and the answer given on the host listener
// (dialog.answer, what the Probe's Dialog Forwarder delivers from the Gateway) is typed as keys:
// allowed, the command runs and the file is in the workspace; denied, it does not. Either way
// the turn ends, the adapter leaves codex and the task is done.
func TestCodexScreenApprovalInAppliance(t *testing.T) {
	out := agentsAppliance(t)
	_, port := serveModel(t, scriptedmodel.Script{Command: "echo made-by-the-agent > result.txt", Final: "The file is written.", Escalate: true})
	rt := &probe.QEMURuntime{Out: out, State: t.TempDir(), Sockets: shortDir(t),
		GuestFwd: map[int]int{modelPort: port}, TCGCPU: "max", Logf: func(string, ...any) {}}
	ctx := t.Context()
	sb, err := rt.Boot(ctx, spec.DevBox{Name: "agents", MemoryMiB: 2048})
	if err != nil {
		t.Fatalf("boot the agents appliance: %v", err)
	}
	t.Cleanup(func() { sb.Stop(context.Background()) })
	br := probe.NewBridge(sb.Endpoint(), sb.Token())
	if err := br.EnsureAgent(ctx, "main"); err != nil {
		t.Fatal(err)
	}
	client := rpc.NewClient(sb.Endpoint(), sb.Token(), &http.Client{Transport: &http.Transport{Proxy: nil}})
	task := agent.Task{Prompt: "write result.txt", ModelURL: fmt.Sprintf("http://%s:%d", vm.GuestFwdAddr, modelPort), APIKey: "sk-scripted",
		Model: "scripted", Dialog: true}
	for _, tc := range []struct {
		session, choice string
		want            bool
	}{{"allowed", "allow", true}, {"denied", "deny", false}} {
		t.Run(tc.session, func(t *testing.T) {
			if _, err := br.EnsureSession(ctx, "main", tc.session); err != nil {
				t.Fatal(err)
			}
			events := &eventLog{}
			actx, cancel := context.WithCancel(ctx)
			defer cancel()
			a := agent.Start(actx, agent.Config{Client: client, DevBox: "agents", Agent: "main", Session: tc.session, CLI: agent.CLIs["codex"], Task: task,
				Restart: probe.HealPolicy{MaxAttempts: 0, Backoff: time.Second, MaxBackoff: time.Second}, Emit: events.add})
			req := pendingOf(t, client, tc.session, a)
			if !strings.Contains(req.Prompt, "echo made-by-the-agent > result.txt") || req.Source != "codex terminal prompt" || req.Default != "deny" {
				t.Errorf("the dialog's request: %+v, want the screen's command, source codex terminal prompt, default deny", req)
			}
			if st, _, _ := a.State(); st != wire.AgentApproval {
				t.Errorf("while the request is open the adapter is %s (%s), want %s", st, a.Reason(), wire.AgentApproval)
			}
			if got := runIn(t, client, tc.session, "/bin/cat", "result.txt"); strings.Contains(got, "made-by-the-agent") {
				t.Fatalf("the command ran before it was answered")
			}
			if err := client.Call(ctx, "dialog.answer", map[string]any{"request_id": req.RequestID, "choice": tc.choice, "by": "test"}, nil); err != nil {
				t.Fatalf("dialog.answer: %v", err)
			}
			mark := "You approved codex"
			if !tc.want {
				mark = "You canceled the request"
			}
			waitDone(t, a) // the turn over, the adapter leaves codex (/quit): its run ends
			if st, _, runs := a.State(); st != wire.AgentDone || len(runs) != 1 || !strings.Contains(a.Screen(), mark) {
				t.Errorf("after the answer %s: adapter %s (%s), runs %v, want done with %q on the screen:\n%s", tc.choice, st, a.Reason(), runs, mark, a.Screen())
			}
			if got := events.statuses(tc.session); !strings.Contains(got, wire.AgentApproval) || !strings.HasSuffix(got, wire.AgentDone) {
				t.Errorf("the session's status events %q: want %s ... %s", got, wire.AgentApproval, wire.AgentDone)
			}
			got := runIn(t, client, tc.session, "/bin/cat", "result.txt")
			if ran := strings.Contains(got, "made-by-the-agent"); ran != tc.want {
				t.Errorf("answered %s: result.txt %q (the command ran: %v); screen:\n%s", tc.choice, got, ran, a.Screen())
			}
			if n := a.ScreenPrompts(); n != 1 {
				t.Errorf("%d screen prompts went to the dialog, want 1", n)
			}
		})
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
