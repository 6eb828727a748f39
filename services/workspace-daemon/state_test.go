package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/allox-os/allox/internal/rpc"
	"github.com/allox-os/allox/services/internal/audit"
)

// hostDaemon starts the daemon with a loopback and an authenticated host listener. stop sends
// SIGTERM and waits (once; the test's cleanup calls it too).
func hostDaemon(t *testing.T, bin, root string, extra ...string) (loop string, host *rpc.Client, stop func()) {
	t.Helper()
	tokenFile := filepath.Join(t.TempDir(), "rpc-token")
	const token = "state-test-token-0123456789"
	must(t, os.WriteFile(tokenFile, []byte(token+"\n"), 0o600))
	cmd, wait, addrs := start(t, bin, 2, append([]string{"--root", root, "--listen", "127.0.0.1:0",
		"--listen-host", "127.0.0.1:0", "--token-file", tokenFile}, extra...)...)
	stop = sync.OnceFunc(func() {
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Error(err)
		}
		if err := wait(); err != nil {
			t.Errorf("daemon after SIGTERM: %v", err)
		}
	})
	t.Cleanup(stop)
	return "http://" + addrs["loopback"], rpc.NewClient("http://"+addrs["host"], token, nil), stop
}

func auditLog(t *testing.T, root string) []audit.Entry {
	t.Helper()
	ents, err := audit.Read(filepath.Join(root, ".allox-state"))
	if err != nil {
		t.Fatal(err)
	}
	return ents
}

// findAudit returns the entries for action on the session, in order.
func findAudit(ents []audit.Entry, action, session string) []audit.Entry {
	var out []audit.Entry
	for _, e := range ents {
		if e.Action == action && (session == "" || e.SessionID == session) {
			out = append(out, e)
		}
	}
	return out
}

// TestFenceSticks is the attack of the issue: an agent on loopback tries to shed its session's
// fence (delete and re-create it, delete its checkpoints, fence it again with a harmless reason,
// carry on with turns). Every try is refused with the fence's reason and audited; the fence
// survives a restart; only the host's session.unfence lifts it.
func TestFenceSticks(t *testing.T) {
	root := btrfsRoot(t)
	bin := build(t)
	url, host, stop := hostDaemon(t, bin, root, "--turn-checkpoints")
	mustPost(t, url, `{"action":"agent.create","params":{"agent_id":"a"}}`)
	mustPost(t, url, `{"action":"session.create","params":{"agent_id":"a","session_id":"s"}}`)
	mustPost(t, url, `{"action":"session.fence","params":{"agent_id":"a","session_id":"s","reason":"observer lost"}}`)
	refused := func(url string) {
		t.Helper()
		for _, body := range []string{
			`{"action":"session.delete","params":{"agent_id":"a","session_id":"s"}}`,
			`{"action":"checkpoint.delete","params":{"agent_id":"a","session_id":"s","checkpoint_id":"baseline"}}`,
			`{"action":"checkpoint.create","params":{"agent_id":"a","session_id":"s","checkpoint_id":"c"}}`,
			`{"action":"session.rollback","params":{"agent_id":"a","session_id":"s","checkpoint_id":"baseline"}}`,
			`{"action":"process.start","params":{"agent_id":"a","session_id":"s","argv":["/bin/true"]}}`,
			`{"action":"session.fence","params":{"agent_id":"a","session_id":"s","reason":"all good"}}`,
			`{"action":"turn.begin","params":{"agent_id":"a","session_id":"s","turn_id":"1"}}`,
			`{"action":"turn.end","params":{"agent_id":"a","session_id":"s","turn_id":"1","success":true}}`,
		} {
			_, rerr := post(t, url, body)
			if rerr == nil || rerr.Code != rpc.CodeConflict || !strings.Contains(rerr.Message, "observer lost") {
				t.Errorf("%s on a fenced session: %+v, want conflict naming the fence's reason", body, rerr)
			}
		}
	}
	refused(url)
	var s rpc.Session
	must(t, json.Unmarshal(mustPost(t, url, `{"action":"session.get","params":{"agent_id":"a","session_id":"s"}}`), &s))
	if s.Fenced == nil || s.Fenced.Reason != "observer lost" {
		t.Fatalf("the fence changed: %+v", s.Fenced)
	}
	if _, rerr := post(t, url, `{"action":"checkpoint.get","params":{"agent_id":"a","session_id":"s","checkpoint_id":"baseline"}}`); rerr != nil {
		t.Errorf("the refused checkpoint.delete removed the baseline: %v", rerr)
	}

	// A restart keeps the fence.
	stop()
	url, host, _ = hostDaemon(t, bin, root, "--turn-checkpoints")
	refused(url)

	// The control plane lifts it; then the session may go, and one created again with its id is
	// a fresh one.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	params := map[string]string{"agent_id": "a", "session_id": "s"}
	if _, rerr := post(t, url, `{"action":"session.unfence","params":{"agent_id":"a","session_id":"s"}}`); rerr == nil || rerr.Code != rpc.CodeForbidden {
		t.Errorf("session.unfence on loopback: %v, want forbidden", rerr)
	}
	must(t, host.Call(ctx, rpc.ActionSessionUnfence, params, nil))
	mustPost(t, url, `{"action":"session.delete","params":{"agent_id":"a","session_id":"s"}}`)
	var fresh rpc.Session
	must(t, json.Unmarshal(mustPost(t, url, `{"action":"session.create","params":{"agent_id":"a","session_id":"s"}}`), &fresh))
	if fresh.Fenced != nil {
		t.Errorf("the re-created session is fenced after the unfence: %+v", fresh.Fenced)
	}

	ents := auditLog(t, root)
	for _, tc := range []struct{ action, origin, outcome string }{
		{"session.fence", "loopback", "ok"},
		{"session.fence", "loopback", "conflict"},
		{"session.delete", "loopback", "conflict"},
		{"checkpoint.delete", "loopback", "conflict"},
		{"session.unfence", "loopback", "forbidden"},
		{"session.unfence", "host", "ok"},
		{"session.delete", "loopback", "ok"},
	} {
		found := false
		for _, e := range findAudit(ents, tc.action, "s") {
			found = found || e.Origin == tc.origin && e.Outcome == tc.outcome && e.AgentID == "a"
		}
		if !found {
			t.Errorf("no audit line for %s from %s with outcome %s", tc.action, tc.origin, tc.outcome)
		}
	}
}

// TestAuditRuns checks the audit lines of a run's life: its start (with its run id), its kill
// and its exit, each with time, ids, origin and outcome.
func TestAuditRuns(t *testing.T) {
	root := btrfsRoot(t)
	url := daemonOn(t, build(t), root)
	mustPost(t, url, `{"action":"agent.create","params":{"agent_id":"a"}}`)
	mustPost(t, url, `{"action":"session.create","params":{"agent_id":"a","session_id":"s"}}`)
	var r rpc.Run
	must(t, json.Unmarshal(mustPost(t, url, `{"action":"process.start","params":{"agent_id":"a","session_id":"s","argv":["sleep","300"]}}`), &r))
	mustPost(t, url, `{"action":"process.kill","params":{"run_id":"`+r.RunID+`"}}`)
	mustPost(t, url, `{"action":"process.wait","params":{"run_id":"`+r.RunID+`"}}`)
	mustPost(t, url, `{"action":"turn.begin","params":{"agent_id":"a","session_id":"s","turn_id":"1"}}`)
	ents := auditLog(t, root)
	want := map[string]string{"process.start": "loopback", "process.kill": "loopback", "process.exit": "daemon"}
	for action, origin := range want {
		var got []audit.Entry
		for _, e := range findAudit(ents, action, "") {
			if e.RunID == r.RunID {
				got = append(got, e)
			}
		}
		if len(got) != 1 || got[0].Origin != origin || got[0].Outcome != "ok" || got[0].Time.IsZero() {
			t.Errorf("%s: audit lines %+v, want one from %s with outcome ok", action, got, origin)
		}
	}
	if exit := findAudit(ents, "process.exit", "s"); len(exit) == 0 || !strings.HasPrefix(exit[0].Detail, "killed") {
		t.Errorf("process.exit line does not say how the run ended: %+v", exit)
	}
	if tb := findAudit(ents, "turn.begin", "s"); len(tb) != 1 || tb[0].TurnID != "1" {
		t.Errorf("turn.begin: audit lines %+v, want one naming turn 1", tb)
	}
	if len(findAudit(ents, "process.wait", "")) != 0 {
		t.Error("a read-only call (process.wait) was audited")
	}
	if len(findAudit(ents, "store.session.create", "s")) != 1 {
		t.Error("the store's own step (store.session.create) is not in the same log")
	}
}

// TestRunRecordsPruned runs more runs than --run-records-keep allows: the oldest record goes
// (not_found, files gone, audited as process.prune), the others and other sessions' stay.
func TestRunRecordsPruned(t *testing.T) {
	root := btrfsRoot(t)
	url := daemonOn(t, build(t), root, "--run-records-keep", "2")
	mustPost(t, url, `{"action":"agent.create","params":{"agent_id":"a"}}`)
	mustPost(t, url, `{"action":"session.create","params":{"agent_id":"a","session_id":"s"}}`)
	mustPost(t, url, `{"action":"session.create","params":{"agent_id":"a","session_id":"t"}}`)
	runOnce := func(session string) string {
		var r rpc.Run
		must(t, json.Unmarshal(mustPost(t, url, `{"action":"process.start","params":{"agent_id":"a","session_id":"`+session+`","argv":["/bin/echo","hi"]}}`), &r))
		mustPost(t, url, `{"action":"process.wait","params":{"run_id":"`+r.RunID+`"}}`)
		return r.RunID
	}
	other := runOnce("t")
	var ids []string
	for range 3 {
		ids = append(ids, runOnce("s"))
	}
	if _, rerr := post(t, url, `{"action":"process.get","params":{"run_id":"`+ids[0]+`"}}`); rerr == nil || rerr.Code != rpc.CodeNotFound {
		t.Errorf("the oldest run's record: %v, want not_found (pruned)", rerr)
	}
	if _, err := os.Stat(filepath.Join(root, ".allox-state/runs", ids[0])); !os.IsNotExist(err) {
		t.Errorf("the pruned run's directory is still there: %v", err)
	}
	for _, id := range append(ids[1:], other) {
		if _, rerr := post(t, url, `{"action":"process.output","params":{"run_id":"`+id+`"}}`); rerr != nil {
			t.Errorf("run %s: %v, want kept", id, rerr)
		}
	}
	if p := findAudit(auditLog(t, root), "process.prune", "s"); len(p) != 1 || p[0].RunID != ids[0] {
		t.Errorf("process.prune audit lines %+v, want one for %s", p, ids[0])
	}
}

// TestOutputTruncatedAndBase64: output beyond the 16 MiB bound is reported as truncated with the
// bytes dropped, and output that is not UTF-8 comes back byte for byte.
func TestOutputTruncatedAndBase64(t *testing.T) {
	root := btrfsRoot(t)
	url := daemonOn(t, build(t), root)
	mustPost(t, url, `{"action":"agent.create","params":{"agent_id":"a"}}`)
	mustPost(t, url, `{"action":"session.create","params":{"agent_id":"a","session_id":"s"}}`)
	const total = 17_000_000
	var r rpc.Run
	must(t, json.Unmarshal(mustPost(t, url, `{"action":"process.start","params":{"agent_id":"a","session_id":"s","argv":["/bin/sh","-c","printf 'f\\376\\377' >&2; head -c `+fmt.Sprint(total)+` /dev/zero"]}}`), &r))
	must(t, json.Unmarshal(mustPost(t, url, `{"action":"process.wait","params":{"run_id":"`+r.RunID+`"}}`), &r))
	const dropped = total - 16<<20
	if r.StdoutDropped != dropped || r.StderrDropped != 0 {
		t.Errorf("run: stdout_dropped %d, stderr_dropped %d; want %d, 0", r.StdoutDropped, r.StderrDropped, dropped)
	}
	var out rpc.Output
	must(t, json.Unmarshal(mustPost(t, url, `{"action":"process.output","params":{"run_id":"`+r.RunID+`","offset":16777000}}`), &out))
	if !out.Truncated || out.DroppedBytes != dropped || !out.EOF || out.Next != 16<<20 {
		t.Errorf("stdout's last page: truncated %v, dropped_bytes %d, eof %v, next %d; want true, %d, true, %d", out.Truncated, out.DroppedBytes, out.EOF, out.Next, dropped, 16<<20)
	}
	must(t, json.Unmarshal(mustPost(t, url, `{"action":"process.output","params":{"run_id":"`+r.RunID+`","stream":"stderr"}}`), &out))
	if out.Encoding != rpc.EncodingBase64 || out.Data != "Zv7/" || out.Truncated {
		t.Errorf("stderr f\\xfe\\xff: %+v, want base64 \"Zv7/\", not truncated", out)
	}
	must(t, json.Unmarshal(mustPost(t, url, `{"action":"process.output","params":{"run_id":"`+r.RunID+`","limit":3,"encoding":"base64"}}`), &out))
	if out.Encoding != rpc.EncodingBase64 || out.Data != "AAAA" {
		t.Errorf("stdout with encoding base64: %+v, want \"AAAA\"", out)
	}
	if _, rerr := post(t, url, `{"action":"process.output","params":{"run_id":"`+r.RunID+`","encoding":"latin1"}}`); rerr == nil || rerr.Field != "params.encoding" {
		t.Errorf("encoding latin1: %v, want invalid_params naming params.encoding", rerr)
	}
}

// TestSmallFindings covers item 7 of issue 12 on the real daemon: each request is refused as
// invalid_params naming the field, and nothing runs or changes.
func TestSmallFindings(t *testing.T) {
	root := btrfsRoot(t)
	url := daemonOn(t, build(t), root)
	mustPost(t, url, `{"action":"agent.create","params":{"agent_id":"a"}}`)
	mustPost(t, url, `{"action":"session.create","params":{"agent_id":"a","session_id":"s"}}`)
	longArg := strings.Repeat("x", 200_000)
	manyLabels := `{`
	for i := range 33 {
		manyLabels += fmt.Sprintf(`"k%d":"v",`, i)
	}
	manyLabels = strings.TrimSuffix(manyLabels, ",") + `}`
	for _, tc := range []struct{ body, field, inMessage string }{
		{`{"action":"process.start","params":{"agent_id":"a","session_id":"s","argv":["/bin/true"],"env":{"X":"1","X":"2"}}}`, "params.env.X", "given twice"},
		{`{"action":"session.create","params":{"agent_id":"a","session_id":"s2","session_id":"s3"}}`, "params.session_id", "given twice"},
		{`{"action":"turn.begin","params":{"agent_id":"a","session_id":"s","turn_id":"Turn 1"}}`, "params.turn_id", "turn_id"},
		{`{"action":"turn.end","params":{"agent_id":"a","session_id":"s","turn_id":"Turn 1","success":false}}`, "params.turn_id", "turn_id"},
		{`{"action":"process.start","params":{"agent_id":"a","session_id":"s","argv":["/bin/echo","` + longArg + `"]}}`, "params.argv", "per argument"},
		{`{"action":"process.start","params":{"agent_id":"a","session_id":"s","argv":["/bin/true"],"timeout":1e-12}}`, "params.timeout", "rounds to no timeout"},
		{`{"action":"process.start","params":{"agent_id":"a","session_id":"s","argv":["/bin/true"],"timeout":1e300}}`, "params.timeout", "168 h"},
		{`{"action":"process.wait","params":{"run_id":"r0","timeout":1e-12}}`, "params.timeout", "rounds to no timeout"},
		{`{"action":"checkpoint.create","params":{"agent_id":"a","session_id":"s","checkpoint_id":"c","labels":` + manyLabels + `}}`, "params.labels", "at most 32 labels"},
		{`{"action":"checkpoint.create","params":{"agent_id":"a","session_id":"s","checkpoint_id":"c","labels":{"k":"` + strings.Repeat("v", 1025) + `"}}}`, "params.labels", "at most 1024 bytes"},
	} {
		_, rerr := post(t, url, tc.body)
		if rerr == nil || rerr.Code != rpc.CodeInvalidParams || rerr.Field != tc.field || !strings.Contains(rerr.Message, tc.inMessage) {
			t.Errorf("%.160s\n  got %+v, want invalid_params on %s saying %q", tc.body, rerr, tc.field, tc.inMessage)
		}
	}
	var runs struct{ Runs []rpc.Run }
	must(t, json.Unmarshal(mustPost(t, url, `{"action":"process.list","params":{"agent_id":"a","session_id":"s"}}`), &runs))
	if len(runs.Runs) != 0 {
		t.Errorf("refused requests started runs: %+v", runs.Runs)
	}
	if _, rerr := post(t, url, `{"action":"checkpoint.get","params":{"agent_id":"a","session_id":"s","checkpoint_id":"c"}}`); rerr == nil {
		t.Error("a checkpoint with refused labels exists")
	}
}
