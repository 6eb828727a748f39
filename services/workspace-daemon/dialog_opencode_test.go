package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// opencode's flavor of the hook (what the Probe's opencode plugin runs for each tool call): the
// tool call's JSON in, one question up, the answer out as {"decision", "reason"}; the arguments
// are asked about but only metadata is stored.
func TestDialogOpencodeHook(t *testing.T) {
	loop, host, root := dialogDaemon(t)
	must(t, os.WriteFile(filepath.Join(root, "agents/a/workspace/sessions/s/current/call.json"),
		[]byte(`{"tool":"bash","sessionID":"ses_1","callID":"call_1","args":{"command":"rm -rf build","description":"clean"}}`), 0o644))
	for _, answer := range []string{"allow", "deny"} {
		r := startRun(t, loop, `/run/allox/bin/allox dialog hook opencode --timeout 60 <call.json`)
		q := nextQuestion(t, host)
		if q.Prompt != "opencode wants to use bash: rm -rf build" || strings.Join(q.Options, ",") != "allow,deny" || q.Default != "deny" {
			t.Fatalf("question %+v", q)
		}
		must(t, host.Call(context.Background(), "dialog.answer", map[string]any{"request_id": q.RequestID, "choice": answer, "by": "policy:test"}, nil))
		out, _ := waitOutput(t, loop, r)
		var got struct{ Decision, Reason string }
		if err := json.Unmarshal([]byte(out), &got); err != nil || got.Decision != answer || !strings.Contains(got.Reason, "policy:test") {
			t.Fatalf("answer %s: hook output %q (%v)", answer, out, err)
		}
	}
	assertNowhere(t, filepath.Join(root, ".allox-state"), "rm -rf build")
}

// Bad input to the opencode hook: no question is asked and the run fails naming what to fix.
func TestDialogOpencodeHookRefusals(t *testing.T) {
	loop, host, root := dialogDaemon(t)
	must(t, os.WriteFile(filepath.Join(root, "agents/a/workspace/sessions/s/current/notool.json"), []byte(`{"args":{}}`), 0o644))
	for script, want := range map[string]string{
		`echo not-json | /run/allox/bin/allox dialog hook opencode`:          "not JSON",
		`/run/allox/bin/allox dialog hook opencode <notool.json`:             `names no "tool"`,
		`/run/allox/bin/allox dialog hook opencode --default ask </dev/null`: "use allow or deny",
	} {
		out, r := waitOutput(t, loop, startRun(t, loop, script+" 2>&1"))
		if r.ExitCode == nil || *r.ExitCode == 0 || !strings.Contains(out, want) {
			t.Errorf("%s: exit %v, output %q; want a failure naming %q", script, r.ExitCode, out, want)
		}
	}
	var res struct{ Requests []dialogRequest }
	must(t, host.Call(context.Background(), "dialog.pending", map[string]any{}, &res))
	if len(res.Requests) != 0 {
		t.Errorf("refused hook calls left questions %+v", res.Requests)
	}
}
