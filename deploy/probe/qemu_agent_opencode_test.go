package probe

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/allox-os/allox/deploy/probe/internal/scriptedmodel"
	"github.com/allox-os/allox/deploy/probe/internal/wire"
	"github.com/allox-os/allox/internal/vm"
)

const opencodeTaskSpec = `
devbox "ocbox" {
  runtime    = "qemu"
  memory_mib = 2048
  agent      = "main"
  session "allow" {}
  session "deny" {}
}
`

// opencode's approvals through the dialog, end to end on the agents appliance under QEMU:
// `gateway task --cli opencode` (approval dialog, the default) starts opencode with the Probe's
// plugin, whose tool.execute.before hook asks `allox dialog hook opencode`; the scripted model's
// shell command waits for its answer (waiting_for_approval in `gateway get`, the file not
// written); allow runs it, deny keeps it from running (opencode tells the model it was denied)
// and both tasks end done.
func TestAgentTaskOpencodeDialog(t *testing.T) {
	out := agentsAppliance(t)
	model, port := serveModel(t, scriptedmodel.Script{Command: "echo approved-by-dialog > result.txt", Final: "Done."})

	f := newFleet(t)
	gwURL, _, gw := f.gateway("a", "", "--renew-every", "1s", "--stop-after", "8s", "--lost-after", "12s")
	if err := f.ca.IssueFiles(f.pki, "vmhost", "vmhost", "probe"); err != nil {
		t.Fatal(err)
	}
	keys, key := t.TempDir(), marker(t, "sk-key")
	if err := os.WriteFile(filepath.Join(keys, "scripted"), []byte(key+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	state := shortDir(t)
	t.Cleanup(func() { killHolding(state) })
	probeProc := start(t, "vmhost", bins(t)["probe"], "serve", "--gateway", gwURL, "--host", "vmhost", "--pki", f.pki, "--state", state,
		"--slots", "1", "--appliance", out, "--supervise-every", "500ms", "--dialog", "--agent-keys", keys,
		"--qemu-cpu", "max", "--guest-fwd", fmt.Sprintf("%d=%d", modelPort, port))
	a := f.admin(gwURL)
	runGatewayCLI(t, f, gwURL, "apply", writeSpec(t, opencodeTaskSpec))
	waitLong(t, "ocbox running under QEMU", time.Minute, func() bool {
		st := getDevBox(t, a, "ocbox")
		return st.Observed != nil && st.Observed.Phase == wire.PhaseRunning && st.Observed.Sessions["allow"] == wire.PhaseRunning &&
			st.Observed.Sessions["deny"] == wire.PhaseRunning
	})
	client := qemuRPC(t, state, "ocbox")

	var prompts []string
	task := func(session, answer string) {
		prompt := marker(t, "task-prompt")
		prompts = append(prompts, prompt)
		cmd := exec.Command(bins(t)["gateway"], "task", "--gateway", gwURL, "--pki", f.pki, "--devbox", "ocbox", "--session", session,
			"--cli", "opencode", "--model-url", fmt.Sprintf("http://%s:%d", vm.GuestFwdAddr, modelPort), "--model", "scripted",
			"--api-key-ref", "scripted", "-")
		cmd.Stdin = strings.NewReader(prompt)
		o, err := cmd.CombinedOutput()
		var res struct{ ID string }
		if err != nil || json.Unmarshal(o, &res) != nil || !strings.HasPrefix(res.ID, "task-") {
			t.Fatalf("gateway task: %v %s", err, o)
		}
		var it wire.DialogItem
		waitLong(t, session+": the plugin's permission request listed", 2*time.Minute, func() bool {
			for _, i := range dialogItems(t, f, gwURL, false) {
				if i.Session == session && i.Content != nil && i.Content.Prompt == "opencode wants to use bash: echo approved-by-dialog > result.txt" {
					it = i
					return true
				}
			}
			return false
		})
		waitLong(t, session+": waiting_for_approval in gateway get", 15*time.Second, func() bool {
			ag := agentOf(t, a, "ocbox", session)
			return ag.Intent == res.ID && ag.Status == wire.AgentApproval
		})
		if got := runIn(t, client, session, "/bin/cat", "result.txt"); strings.Contains(got, "approved-by-dialog") {
			t.Fatalf("%s: the command ran before its approval: result.txt %q", session, got)
		}
		if o, err := answerCLI(f, gwURL, "ocbox", session, it.RequestID, answer); err != nil || !strings.Contains(o, `"outcome": "answered"`) {
			t.Fatalf("gateway dialog answer %s: %v %s", answer, err, o)
		}
		var ag wire.AgentObserved
		waitLong(t, session+": the task done", time.Minute, func() bool {
			ag = agentOf(t, a, "ocbox", session)
			return ag.Intent == res.ID && (ag.Status == wire.AgentDone || ag.Status == wire.AgentFailed)
		})
		if ag.Status != wire.AgentDone {
			t.Errorf("%s: the agent %+v, want done", session, ag)
		}
	}
	// lastResult is what opencode sent the model back from the tool call.
	lastResult := func() string {
		r := model.Requests()
		for i := len(r) - 1; i >= 0; i-- {
			if r[i].Turn == 2 {
				return r[i].ToolResult
			}
		}
		return ""
	}

	t.Run("allowed", func(t *testing.T) {
		task("allow", "allow")
		if got := runIn(t, client, "allow", "/bin/cat", "result.txt"); !strings.Contains(got, "approved-by-dialog") {
			t.Errorf("result.txt after the approval: %q; the model saw %+v", got, model.Requests())
		}
	})
	t.Run("denied", func(t *testing.T) {
		task("deny", "deny")
		if got := runIn(t, client, "deny", "/bin/cat", "result.txt"); strings.Contains(got, "approved-by-dialog") {
			t.Errorf("the denied command ran: result.txt %q", got)
		}
		if r := lastResult(); !strings.Contains(r, "denied through the Allox dialog") {
			t.Errorf("the tool result the model got after the deny: %q, want the dialog's denial", r)
		}
	})
	audit := runGatewayCLI(t, f, gwURL, "audit", "--limit", "1000")
	gw.kill()
	probeProc.kill()
	assertNowhere(t, append(prompts, key), map[string][]byte{"audit": []byte(audit), "gateway log": logOf(gw), "probe log": logOf(probeProc)},
		f.etcdData[0])
}
