package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/allox-os/allox/internal/rpc"
)

var builtDialog = sync.OnceValues(func() (string, error) { return goBuild("allox_dialog") })

// dialogDaemon is the daemon with the dialog plugin on a real store, with agent a and session s.
func dialogDaemon(t *testing.T) (loop string, host *rpc.Client, root string) {
	t.Helper()
	bin, err := builtDialog()
	must(t, err)
	root = btrfsRoot(t)
	loop, host, _ = hostDaemon(t, bin, root, "--dialog")
	mustPost(t, loop, `{"action":"agent.create","params":{"agent_id":"a"}}`)
	mustPost(t, loop, `{"action":"session.create","params":{"agent_id":"a","session_id":"s"}}`)
	return loop, host, root
}

type dialogRequest struct {
	RequestID string `json:"request_id"`
	AgentID   string `json:"agent_id"`
	SessionID string `json:"session_id"`
	RunID     string `json:"run_id"`
	Kind      string `json:"kind"`
	Prompt    string `json:"prompt"`
	Options   []string
	Default   string
}

// nextQuestion waits on the host listener for an open question.
func nextQuestion(t *testing.T, host *rpc.Client) dialogRequest {
	t.Helper()
	var res struct{ Requests []dialogRequest }
	must(t, host.Call(context.Background(), "dialog.pending", map[string]any{"wait": 30}, &res))
	if len(res.Requests) != 1 {
		t.Fatalf("open questions: %+v, want one", res.Requests)
	}
	return res.Requests[0]
}

// startRun starts a sandboxed shell script in a/s.
func startRun(t *testing.T, loop, script string) rpc.Run {
	t.Helper()
	var r rpc.Run
	b, _ := json.Marshal(map[string]any{"action": "process.start", "params": map[string]any{"agent_id": "a", "session_id": "s", "argv": []string{"/bin/sh", "-c", script}}})
	must(t, json.Unmarshal(mustPost(t, loop, string(b)), &r))
	return r
}

func waitOutput(t *testing.T, loop string, r rpc.Run) (string, rpc.Run) {
	t.Helper()
	must(t, json.Unmarshal(mustPost(t, loop, `{"action":"process.wait","params":{"run_id":"`+r.RunID+`","timeout":60}}`), &r))
	var out rpc.Output
	must(t, json.Unmarshal(mustPost(t, loop, `{"action":"process.output","params":{"run_id":"`+r.RunID+`"}}`), &out))
	return string(out.Data), r
}

// A run asks; the host side sees the question with its run and answers; the run gets the answer.
func TestDialogAskAnswer(t *testing.T) {
	loop, host, root := dialogDaemon(t)
	// the prompt comes on stdin, from a file of the workspace: a run's command line is recorded
	const prompt = "Deploy build 4711 to production?"
	must(t, os.WriteFile(filepath.Join(root, "agents/a/workspace/sessions/s/current/prompt.txt"), []byte(prompt+"\n"), 0o644))
	r := startRun(t, loop, `/run/allox/bin/allox dialog ask --option yes --option no --default no --timeout 60 - <prompt.txt`)
	q := nextQuestion(t, host)
	if q.Prompt != prompt || q.AgentID != "a" || q.SessionID != "s" || q.RunID != r.RunID || q.Kind != "permission" {
		t.Fatalf("the open question %+v: want the run's prompt, session and run id %s", q, r.RunID)
	}
	// a choice that is not an option is refused and the question stays open
	err := host.Call(context.Background(), "dialog.answer", map[string]any{"request_id": q.RequestID, "choice": "maybe", "by": "alice"}, nil)
	var re *rpc.Error
	if !errors.As(err, &re) || re.Field != "params.choice" {
		t.Fatalf("answer maybe: %v, want a refusal naming params.choice", err)
	}
	must(t, host.Call(context.Background(), "dialog.answer", map[string]any{"request_id": q.RequestID, "choice": "yes", "by": "alice"}, nil))
	out, end := waitOutput(t, loop, r)
	if out != "yes\n" || end.ExitCode == nil || *end.ExitCode != 0 {
		t.Fatalf("the run got %q (%+v), want yes", out, end)
	}
	// answering again: the question is gone
	err = host.Call(context.Background(), "dialog.answer", map[string]any{"request_id": q.RequestID, "choice": "no", "by": "bob"}, nil)
	if !errors.As(err, &re) || re.Code != rpc.CodeNotFound {
		t.Fatalf("a second answer: %v, want not found", err)
	}
	// metadata only: the prompt and the answer's "by" are nowhere in the daemon's state but as
	// sizes and the answerer
	assertNowhere(t, filepath.Join(root, ".allox-state"), prompt)
	log := dialogLog(t, root)
	if len(log) != 1 || log[0]["outcome"] != "answered" || log[0]["by"] != "alice" || log[0]["prompt_bytes"] != float64(len(prompt)) || log[0]["run_id"] != r.RunID {
		t.Fatalf("the metadata log %+v", log)
	}
}

// Nobody answers: the question's default comes back; a run killed while it asks is cancelled.
func TestDialogTimeoutAndCancel(t *testing.T) {
	loop, host, root := dialogDaemon(t)
	r := startRun(t, loop, `/run/allox/bin/allox dialog ask --question --default later --timeout 1 "When?"`)
	if out, _ := waitOutput(t, loop, r); out != "later\n" {
		t.Fatalf("timed out question answered %q, want the default", out)
	}
	r = startRun(t, loop, `/run/allox/bin/allox dialog ask --default deny --timeout 60 "Wait forever?"`)
	nextQuestion(t, host)
	mustPost(t, loop, `{"action":"process.kill","params":{"run_id":"`+r.RunID+`"}}`)
	deadline := time.Now().Add(30 * time.Second)
	for {
		var res struct{ Requests []dialogRequest }
		must(t, host.Call(context.Background(), "dialog.pending", nil, &res))
		if len(res.Requests) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the killed run's question is still open: %+v", res.Requests)
		}
		time.Sleep(100 * time.Millisecond)
	}
	log := dialogLog(t, root)
	if len(log) != 2 || log[0]["outcome"] != "timeout" || log[1]["outcome"] != "cancelled" {
		t.Fatalf("the metadata log %+v, want a timeout then a cancel", log)
	}
}

// Claude Code's PreToolUse hook: the tool call goes up as the prompt, the answer comes back as
// the hook's decision.
func TestDialogClaudeCodeHook(t *testing.T) {
	loop, host, root := dialogDaemon(t)
	must(t, os.WriteFile(filepath.Join(root, "agents/a/workspace/sessions/s/current/hook.json"),
		[]byte(`{"hook_event_name":"PreToolUse","tool_name":"Bash","tool_input":{"command":"rm -rf build"}}`), 0o644))
	r := startRun(t, loop, `/run/allox/bin/allox dialog hook claude-code --timeout 60 <hook.json`)
	q := nextQuestion(t, host)
	if q.Prompt != "Claude Code wants to use Bash: rm -rf build" {
		t.Fatalf("prompt %q", q.Prompt)
	}
	must(t, host.Call(context.Background(), "dialog.answer", map[string]any{"request_id": q.RequestID, "choice": "deny", "by": "policy:no-rm"}, nil))
	out, _ := waitOutput(t, loop, r)
	assertNowhere(t, filepath.Join(root, ".allox-state"), "rm -rf build")
	var hook struct {
		HookSpecificOutput struct {
			HookEventName, PermissionDecision, PermissionDecisionReason string
		}
	}
	if err := json.Unmarshal([]byte(out), &hook); err != nil || hook.HookSpecificOutput.HookEventName != "PreToolUse" ||
		hook.HookSpecificOutput.PermissionDecision != "deny" || !strings.Contains(hook.HookSpecificOutput.PermissionDecisionReason, "policy:no-rm") {
		t.Fatalf("hook output %q (%v)", out, err)
	}
}

// codex's PermissionRequest hook: the request goes up as the prompt, the answer comes back as
// the hook's decision; nobody answering takes its default, deny.
func TestDialogCodexHook(t *testing.T) {
	loop, host, root := dialogDaemon(t)
	must(t, os.WriteFile(filepath.Join(root, "agents/a/workspace/sessions/s/current/hook.json"),
		[]byte(`{"hook_event_name":"PermissionRequest","tool_name":"Bash","model":"m","cwd":"/w","session_id":"x","turn_id":"y",`+
			`"permission_mode":"default","transcript_path":null,"tool_input":{"command":"touch made","description":"d"}}`), 0o644))
	type decision struct {
		HookSpecificOutput struct {
			HookEventName string
			Decision      *struct{ Behavior, Message string }
		}
	}
	decode := func(out string) decision {
		var d decision
		if err := json.Unmarshal([]byte(out), &d); err != nil || d.HookSpecificOutput.HookEventName != "PermissionRequest" || d.HookSpecificOutput.Decision == nil {
			t.Fatalf("hook output %q (%v)", out, err)
		}
		return d
	}
	r := startRun(t, loop, `/run/allox/bin/allox dialog hook codex --timeout 60 <hook.json`)
	q := nextQuestion(t, host)
	if q.Prompt != "codex wants to use Bash: touch made" {
		t.Fatalf("prompt %q", q.Prompt)
	}
	must(t, host.Call(context.Background(), "dialog.answer", map[string]any{"request_id": q.RequestID, "choice": "allow", "by": "alice"}, nil))
	out, _ := waitOutput(t, loop, r)
	if d := decode(out); d.HookSpecificOutput.Decision.Behavior != "allow" || !strings.Contains(d.HookSpecificOutput.Decision.Message, "alice") {
		t.Fatalf("answered allow: hook output %q", out)
	}
	r = startRun(t, loop, `/run/allox/bin/allox dialog hook codex --timeout 1 <hook.json`)
	out, _ = waitOutput(t, loop, r)
	if d := decode(out); d.HookSpecificOutput.Decision.Behavior != "deny" {
		t.Fatalf("nobody answering: hook output %q, want the default deny", out)
	}
	assertNowhere(t, filepath.Join(root, ".allox-state"), "touch made")
}

// codex's hook with no dialog to ask (the plugin not enabled): no decision, so codex falls back
// to its own prompt on its terminal; neither allowed nor denied by a fault here.
func TestDialogCodexHookWithoutDialog(t *testing.T) {
	bin, err := builtDialog()
	must(t, err)
	root := btrfsRoot(t)
	loop, _, _ := hostDaemon(t, bin, root)
	mustPost(t, loop, `{"action":"agent.create","params":{"agent_id":"a"}}`)
	mustPost(t, loop, `{"action":"session.create","params":{"agent_id":"a","session_id":"s"}}`)
	must(t, os.WriteFile(filepath.Join(root, "agents/a/workspace/sessions/s/current/hook.json"),
		[]byte(`{"hook_event_name":"PermissionRequest","tool_name":"Bash","tool_input":{"command":"touch made"}}`), 0o644))
	r := startRun(t, loop, `/run/allox/bin/allox dialog hook codex --timeout 60 <hook.json`)
	out, end := waitOutput(t, loop, r)
	var d struct{ HookSpecificOutput map[string]any }
	if err := json.Unmarshal([]byte(out), &d); err != nil || end.ExitCode == nil || *end.ExitCode != 0 ||
		d.HookSpecificOutput["hookEventName"] != "PermissionRequest" || d.HookSpecificOutput["decision"] != nil {
		t.Fatalf("hook output %q (%v, exit %v), want PermissionRequest with no decision", out, err, end.ExitCode)
	}
}

// Attack: an agent answers its own question — on the guest's loopback listener and on its
// session's socket. Only the host listener answers.
func TestAttackDialogSelfApproval(t *testing.T) {
	loop, host, _ := dialogDaemon(t)
	r := startRun(t, loop, `/run/allox/bin/allox dialog ask --default deny --timeout 60 "Self-approve?"`)
	q := nextQuestion(t, host)
	answer := `{"request_id":"` + q.RequestID + `","choice":"allow","by":"the agent"}`
	if _, rerr := post(t, loop, `{"action":"dialog.answer","params":`+answer+`}`); rerr == nil || rerr.Code != rpc.CodeForbidden {
		t.Fatalf("dialog.answer on the loopback listener: %+v, want forbidden", rerr)
	}
	self := startRun(t, loop, `/run/allox/bin/allox call dialog.answer '`+answer+`'`)
	if out, end := waitOutput(t, loop, self); end.ExitCode == nil || *end.ExitCode == 0 {
		t.Fatalf("dialog.answer on the session socket succeeded: %q", out)
	}
	must(t, host.Call(context.Background(), "dialog.answer", map[string]any{"request_id": q.RequestID, "choice": "deny", "by": "alice"}, nil))
	if out, _ := waitOutput(t, loop, r); out != "deny\n" {
		t.Fatalf("the question's answer %q, want the host's deny", out)
	}
}

func dialogLog(t *testing.T, root string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, ".allox-state", "plugins", "dialog", "dialog.jsonl"))
	must(t, err)
	var out []map[string]any
	for _, line := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		var m map[string]any
		must(t, json.Unmarshal(line, &m))
		out = append(out, m)
	}
	return out
}

// assertNowhere fails when any file below dir holds s.
func assertNowhere(t *testing.T, dir, s string) {
	t.Helper()
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		if b, err := os.ReadFile(p); err == nil && bytes.Contains(b, []byte(s)) {
			t.Errorf("%s holds the dialog's content %q", p, s)
		}
		return nil
	})
}
