package probe

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/allox-os/allox/deploy/probe/internal/scriptedmodel"
	"github.com/allox-os/allox/deploy/probe/internal/wire"
	"github.com/allox-os/allox/internal/rpc"
	"github.com/allox-os/allox/internal/vm"
)

const agentTaskSpec = `
devbox "agentbox" {
  runtime    = "qemu"
  memory_mib = 2048
  agent      = "main"
  session "allow" {}
  session "deny" {}
  session "kill" {}
  session "codex" {}
}
`

// A task from the Gateway, end to end on the agents appliance under QEMU: `gateway task` sends
// claude_code a task (prompt on stdin, the model endpoint as the sandbox reaches it, the API key
// by reference to a file of the Probe's); the Probe starts the adapter on the task intent; the
// scripted model asks for a shell command; Claude Code's PreToolUse hook asks through the dialog
// plugin, the Probe's dialog relay and the Gateway; while it waits the session's agent is
// waiting_for_approval in `gateway get` and the command has not run; `gateway dialog answer
// ... allow` runs it (the file appears in the session's workspace) and the task is done. In
// another session the answer deny keeps the command from running and the task still ends. In a
// third, the CLI's run killed while its hook waits is restarted within the Probe's self-heal
// bounds (reported in the audit), asks again, and finishes once allowed. codex, in its TUI,
// asks through its PermissionRequest hook (`allox dialog hook codex` in the session) on the same
// path, and the answer allow is its decision: the file appears. The prompts and the key are
// nowhere in the etcd data, the audit or the processes' logs.
func TestAgentTaskFromGateway(t *testing.T) {
	out := agentsAppliance(t)
	model, port := serveModel(t, scriptedmodel.Script{Command: "echo approved-by-dialog > result.txt", Final: "Done.", Escalate: true})

	af := newAgentFleet(t, out, port, agentTaskSpec, "agentbox", "allow", "deny", "kill", "codex")
	f, gwURL, a, client := af.f, af.gwURL, af.a, af.client
	// waitAsked waits for the session's permission request (not the one with id except): Claude
	// Code's hook, or codex's.
	waitAsked := func(session, except string) wire.DialogItem {
		var it wire.DialogItem
		waitLong(t, session+": the hook's permission request listed", time.Minute, func() bool {
			for _, i := range dialogItems(t, f, gwURL, false) {
				if i.Session == session && i.RequestID != except && i.Content != nil &&
					(strings.Contains(i.Content.Prompt, "Claude Code wants to use Bash: echo approved-by-dialog") ||
						strings.Contains(i.Content.Prompt, "codex wants to use Bash: echo approved-by-dialog > result.txt")) {
					it = i
					return true
				}
			}
			return false
		})
		return it
	}
	task := func(cli, session, answer string, kill bool) (intent string) {
		id := af.task(t, cli, session)
		it := waitAsked(session, "")
		af.waitApproval(t, session, id)
		if kill { // the CLI's run killed while its hook waits: restarted, reported, asked again
			var l struct{ Runs []rpc.Run }
			if err := client.Call(t.Context(), rpc.ActionProcessList, map[string]string{"agent_id": "main", "session_id": session}, &l); err != nil {
				t.Fatal(err)
			}
			killed := 0
			for _, r := range l.Runs {
				if r.State == "running" {
					if err := client.Call(t.Context(), rpc.ActionProcessKill, map[string]string{"run_id": r.RunID}, nil); err != nil {
						t.Fatalf("process.kill: %v", err)
					}
					killed++
				}
			}
			if killed != 1 {
				t.Fatalf("%d running runs in %s, want the CLI's one", killed, session)
			}
			it = waitAsked(session, it.RequestID)
			audit := runGatewayCLI(t, f, gwURL, "audit", "--limit", "1000")
			if !strings.Contains(audit, "restart 1 of 5") {
				t.Errorf("%s: no fault in the audit reporting the restart (1 of --heal-attempts 5)", session)
			}
		}
		af.answer(t, session, it.RequestID, answer, id)
		return id
	}

	t.Run("allowed", func(t *testing.T) {
		task("claude_code", "allow", "allow", false)
		if got := runIn(t, client, "allow", "/bin/cat", "result.txt"); !strings.Contains(got, "approved-by-dialog") {
			t.Errorf("result.txt after the approval: %q; the model saw %+v", got, model.Requests())
		}
	})
	t.Run("denied", func(t *testing.T) {
		task("claude_code", "deny", "deny", false)
		if got := runIn(t, client, "deny", "/bin/cat", "result.txt"); strings.Contains(got, "approved-by-dialog") {
			t.Errorf("the denied command ran: result.txt %q", got)
		}
	})
	t.Run("killed while it waits", func(t *testing.T) {
		task("claude_code", "kill", "allow", true)
		if got := runIn(t, client, "kill", "/bin/cat", "result.txt"); !strings.Contains(got, "approved-by-dialog") {
			t.Errorf("result.txt after the restart and the approval: %q", got)
		}
		if ag := agentOf(t, a, "agentbox", "allow"); ag.Status != wire.AgentDone {
			t.Errorf("another session's agent after the kill: %+v, want still done", ag)
		}
	})
	t.Run("codex allowed through its hook", func(t *testing.T) {
		task("codex", "codex", "allow", false)
		if got := runIn(t, client, "codex", "/bin/cat", "result.txt"); !strings.Contains(got, "approved-by-dialog") {
			t.Errorf("codex's result.txt after the approval: %q", got)
		}
	})
	audit := runGatewayCLI(t, f, gwURL, "audit", "--limit", "1000")
	if !strings.Contains(audit, `"action": "agent.status"`) || !strings.Contains(audit, `"action": "task"`) {
		t.Errorf("the audit has no task or agent.status records")
	}
	// The Probe's state is not searched: the guest's store disk holds the appliance's run
	// records, and a CLI's prompt is on its command line inside the sandbox.
	af.assertContentNowhere(t, audit)
}

// agentFleet is a Gateway and a Probe booting the agents appliance under QEMU, with the dialog
// relay on, an API key "scripted" in its --agent-keys and the scripted model on modelPort.
type agentFleet struct {
	f         *fleet
	gwURL     string
	gw, probe *proc
	a         *wire.AdminClient
	client    *rpc.Client // the VM's host listener
	devbox    string
	key       string   // the API key's value
	prompts   []string // every task's prompt
}

// newAgentFleet starts the fleet for the appliance in out with the model on the host's port,
// applies spec, and waits until devbox and its sessions run.
func newAgentFleet(t *testing.T, out string, port int, spec, devbox string, sessions ...string) *agentFleet {
	t.Helper()
	af := &agentFleet{f: newFleet(t), devbox: devbox}
	f := af.f
	af.gwURL, _, af.gw = f.gateway("a", "", "--renew-every", "1s", "--stop-after", "8s", "--lost-after", "12s")
	if err := f.ca.IssueFiles(f.pki, "vmhost", "vmhost", "probe"); err != nil {
		t.Fatal(err)
	}
	keys := t.TempDir()
	af.key = marker(t, "sk-key")
	if err := os.WriteFile(filepath.Join(keys, "scripted"), []byte(af.key+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	state := shortDir(t)
	t.Cleanup(func() { killHolding(state) })
	af.probe = start(t, "vmhost", bins(t)["probe"], "serve", "--gateway", af.gwURL, "--host", "vmhost", "--pki", f.pki, "--state", state,
		"--slots", "1", "--appliance", out, "--supervise-every", "500ms", "--dialog", "--agent-keys", keys,
		"--qemu-cpu", "max", "--guest-fwd", fmt.Sprintf("%d=%d", modelPort, port))
	af.a = f.admin(af.gwURL)
	runGatewayCLI(t, f, af.gwURL, "apply", writeSpec(t, spec))
	waitLong(t, devbox+" running under QEMU", time.Minute, func() bool {
		st := getDevBox(t, af.a, devbox)
		if st.Observed == nil || st.Observed.Phase != wire.PhaseRunning {
			return false
		}
		for _, s := range sessions {
			if st.Observed.Sessions[s] != wire.PhaseRunning {
				return false
			}
		}
		return true
	})
	af.client = qemuRPC(t, state, devbox)
	return af
}

// task sends cli a task in session with `gateway task` (a fresh prompt on stdin, the scripted
// model, the key by reference) and returns its intent id.
func (af *agentFleet) task(t *testing.T, cli, session string) string {
	t.Helper()
	prompt := marker(t, "task-prompt")
	af.prompts = append(af.prompts, prompt)
	cmd := exec.Command(bins(t)["gateway"], "task", "--gateway", af.gwURL, "--pki", af.f.pki, "--devbox", af.devbox, "--session", session,
		"--cli", cli, "--model-url", fmt.Sprintf("http://%s:%d", vm.GuestFwdAddr, modelPort), "--model", "scripted",
		"--api-key-ref", "scripted", "-")
	cmd.Stdin = strings.NewReader(prompt)
	o, err := cmd.CombinedOutput()
	var res struct{ ID string }
	if err != nil || json.Unmarshal(o, &res) != nil || !strings.HasPrefix(res.ID, "task-") {
		t.Fatalf("gateway task: %v %s", err, o)
	}
	return res.ID
}

// waitApproval waits until `gateway get` shows session's agent on intent id waiting_for_approval.
func (af *agentFleet) waitApproval(t *testing.T, session, id string) {
	t.Helper()
	waitLong(t, session+": waiting_for_approval in gateway get", 15*time.Second, func() bool {
		ag := agentOf(t, af.a, af.devbox, session)
		return ag.Intent == id && ag.Status == wire.AgentApproval
	})
}

// answer checks that session's command (the scripted model's, writing result.txt) has not run
// yet, answers session's request with `gateway dialog answer`, and checks that the task of
// intent id ends done.
func (af *agentFleet) answer(t *testing.T, session, request, answer, id string) {
	t.Helper()
	if got := runIn(t, af.client, session, "/bin/cat", "result.txt"); strings.Contains(got, "approved-by-dialog") {
		t.Fatalf("%s: the command ran before its approval: result.txt %q", session, got)
	}
	if o, err := answerCLI(af.f, af.gwURL, af.devbox, session, request, answer); err != nil || !strings.Contains(o, `"outcome": "answered"`) {
		t.Fatalf("gateway dialog answer %s: %v %s", answer, err, o)
	}
	var ag wire.AgentObserved
	waitLong(t, session+": the task done", time.Minute, func() bool {
		ag = agentOf(t, af.a, af.devbox, session)
		return ag.Intent == id && (ag.Status == wire.AgentDone || ag.Status == wire.AgentFailed)
	})
	if ag.Status != wire.AgentDone {
		t.Errorf("%s: the agent %+v, want done", session, ag)
	}
}

// assertContentNowhere stops the Gateway and the Probe and checks that no prompt and not the
// key are in the audit, their logs or etcd's data.
func (af *agentFleet) assertContentNowhere(t *testing.T, audit string) {
	t.Helper()
	af.gw.kill()
	af.probe.kill()
	assertNowhere(t, append(af.prompts, af.key), map[string][]byte{"audit": []byte(audit), "gateway log": logOf(af.gw), "probe log": logOf(af.probe)},
		af.f.etcdData[0])
}

// agentOf is the session's agent as `gateway get` shows it.
func agentOf(t *testing.T, a *wire.AdminClient, devbox, session string) wire.AgentObserved {
	st := getDevBox(t, a, devbox)
	if st.Observed == nil {
		return wire.AgentObserved{}
	}
	return st.Observed.Agents[session]
}

// qemuRPC is the host listener of devbox's VM, from the QEMU runtime's record in the Probe's
// state (its forwarded port and its token's file).
func qemuRPC(t *testing.T, state, devbox string) *rpc.Client {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(state, "sandbox-"+devbox+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var rec struct {
		HostPort  int    `json:"host_port"`
		TokenFile string `json:"token_file"`
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	tok, err := os.ReadFile(rec.TokenFile)
	if err != nil {
		t.Fatal(err)
	}
	return rpc.NewClient(fmt.Sprintf("http://127.0.0.1:%d", rec.HostPort), strings.TrimSpace(string(tok)), &http.Client{Transport: &http.Transport{Proxy: nil}})
}

// waitLong polls cond for up to d scaled for the accelerator (the agents' CLIs under TCG).
func waitLong(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(vm.Scaled(d))
	for !cond() {
		if time.Now().After(deadline) {
			b, _ := json.Marshal(lastSeen)
			t.Fatalf("%s: not within %v (accel %s; last devbox status seen: %s)", what, vm.Scaled(d), vm.Accel(), b)
		}
		time.Sleep(250 * time.Millisecond)
	}
}
