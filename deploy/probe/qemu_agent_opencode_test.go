package probe

import (
	"strings"
	"testing"
	"time"

	"github.com/allox-os/allox/deploy/probe/internal/scriptedmodel"
	"github.com/allox-os/allox/deploy/probe/internal/wire"
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

	af := newAgentFleet(t, out, port, opencodeTaskSpec, "ocbox", "allow", "deny")
	f, gwURL, client := af.f, af.gwURL, af.client
	task := func(session, answer string) {
		id := af.task(t, "opencode", session)
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
		af.waitApproval(t, session, id)
		af.answer(t, session, it.RequestID, answer, id)
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
	af.assertContentNowhere(t, audit)
}
