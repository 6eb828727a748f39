package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"github.com/allox-os/allox/internal/testenv"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/allox-os/allox/internal/btrfstest"
	"github.com/allox-os/allox/internal/rpc"
)

// btrfsRoot makes a real Btrfs filesystem on a loop device and mounts it: the store under test.
func btrfsRoot(t testing.TB) string {
	t.Helper()
	testenv.Tool(t, "bwrap", "apt-get install bubblewrap")
	return btrfstest.Mount(t)
}

// post sends a body exactly as the seed's curl commands do and decodes the reply envelope.
func post(t testing.TB, url, body string) (json.RawMessage, *rpc.Error) {
	t.Helper()
	resp, err := http.Post(url+"/v1/rpc", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var env struct {
		OK     bool            `json:"ok"`
		Result json.RawMessage `json:"result"`
		Error  *rpc.Error      `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&env); err != nil {
		t.Fatalf("%s: reply does not decode: %v", body, err)
	}
	return env.Result, env.Error
}

func mustPost(t testing.TB, url, body string) json.RawMessage {
	t.Helper()
	res, rerr := post(t, url, body)
	if rerr != nil {
		t.Fatalf("%s: %v", body, rerr)
	}
	return res
}

func TestSeedSequenceAndRollback(t *testing.T) {
	root := btrfsRoot(t)
	bin := build(t)
	url := daemonOn(t, bin, root)

	// The seed's four curl commands, verbatim bodies.
	mustPost(t, url, `{"action":"agent.create","params":{"agent_id":"agent-a"}}`)
	mustPost(t, url, `{"action":"session.create","params":{"agent_id":"agent-a","session_id":"session-1"}}`)
	mustPost(t, url, `{"action":"session.create","params":{"agent_id":"agent-a","session_id":"session-2"}}`)
	current := filepath.Join(root, "agents/agent-a/workspace/sessions/session-1/current")
	other := filepath.Join(root, "agents/agent-a/workspace/sessions/session-2/current")
	shared := filepath.Join(root, "agents/agent-a/workspace/shared")
	must(t, os.WriteFile(filepath.Join(current, "kept.txt"), []byte("before\n"), 0o644))
	must(t, os.Lchown(filepath.Join(current, "kept.txt"), 2000, 2000)) // as if an earlier run wrote it
	must(t, os.WriteFile(filepath.Join(other, "other.txt"), []byte("other session\n"), 0o644))
	mustPost(t, url, `{"action":"checkpoint.create","params":{"agent_id":"agent-a","session_id":"session-1","checkpoint_id":"clean"}}`)

	// A tracked run changes the workspace (and writes a /tmp file that is synced back).
	res := mustPost(t, url, `{"action":"process.start","params":{"agent_id":"agent-a","session_id":"session-1","argv":["/bin/sh","-c","printf changed > kept.txt; echo new > new.txt; echo t > /tmp/t.txt; echo out"]}}`)
	var run rpc.Run
	must(t, json.Unmarshal(res, &run))
	res = mustPost(t, url, `{"action":"process.wait","params":{"run_id":"`+run.RunID+`"}}`)
	must(t, json.Unmarshal(res, &run))
	if run.State != "exited" || run.ExitCode == nil || *run.ExitCode != 0 {
		t.Fatalf("run ended %+v", run)
	}
	if b, _ := os.ReadFile(filepath.Join(current, "kept.txt")); string(b) != "changed" {
		t.Fatalf("the run did not write into current/: %q", b)
	}
	otherBefore, _ := os.ReadFile(filepath.Join(other, "other.txt"))
	sharedBefore, _ := os.ReadDir(shared)

	mustPost(t, url, `{"action":"session.rollback","params":{"agent_id":"agent-a","session_id":"session-1","checkpoint_id":"clean"}}`)
	if b, err := os.ReadFile(filepath.Join(current, "kept.txt")); err != nil || string(b) != "before\n" {
		t.Errorf("rollback did not restore kept.txt: %q %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(current, "new.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a file created after the checkpoint survived the rollback: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(other, "other.txt")); !bytes.Equal(b, otherBefore) {
		t.Errorf("another session changed: %q", b)
	}
	if after, _ := os.ReadDir(shared); len(after) != len(sharedBefore) {
		t.Errorf("shared/ changed across the rollback")
	}
	// The run's record outlives the rollback: it is daemon state, outside the workspace.
	res = mustPost(t, url, `{"action":"process.output","params":{"run_id":"`+run.RunID+`"}}`)
	var out rpc.Output
	must(t, json.Unmarshal(res, &out))
	if out.Data != "out\n" {
		t.Errorf("process.output after rollback = %q", out.Data)
	}
}

func TestBadRequestsChangeNothing(t *testing.T) {
	root := btrfsRoot(t)
	bin := build(t)
	url := daemonOn(t, bin, root)
	mustPost(t, url, `{"action":"agent.create","params":{"agent_id":"agent-a"}}`)
	mustPost(t, url, `{"action":"session.create","params":{"agent_id":"agent-a","session_id":"s"}}`)
	tests := []struct {
		body        string
		code, field string
	}{
		{`{"action":"agent.create","params":{"agent_id":"../etc"}}`, "invalid_params", "params.agent_id"},
		{`{"action":"session.create","params":{"agent_id":"agent-a","session_id":".hidden"}}`, "invalid_params", "params.session_id"},
		{`{"action":"session.rollback","params":{"agent_id":"agent-a","session_id":"s","checkpoint_id":"nope"}}`, "not_found", "params.checkpoint_id"},
		{`{"action":"checkpoint.create","params":{"agent_id":"agent-a","session_id":"s","checkpoint_id":"c","colour":"red"}}`, "invalid_params", "params.colour"},
		{`{"action":"session.frobnicate","params":{}}`, "unknown_action", "action"},
		{`{"action":"session.unfence","params":{"agent_id":"agent-a","session_id":"s"}}`, "forbidden", "action"},
	}
	for _, tc := range tests {
		_, rerr := post(t, url, tc.body)
		if rerr == nil || string(rerr.Code) != tc.code || rerr.Field != tc.field {
			t.Errorf("%s\n  got %+v, want code %s field %s", tc.body, rerr, tc.code, tc.field)
		}
	}
	res := mustPost(t, url, `{"action":"checkpoint.list","params":{"agent_id":"agent-a","session_id":"s"}}`)
	var list struct{ Checkpoints []rpc.Checkpoint }
	must(t, json.Unmarshal(res, &list))
	if len(list.Checkpoints) != 1 || list.Checkpoints[0].CheckpointID != "baseline" {
		t.Errorf("checkpoints after failed requests: %+v (want only the baseline)", list.Checkpoints)
	}
}

func TestFencedSessionRefusesStateChanges(t *testing.T) {
	root := btrfsRoot(t)
	bin := build(t)
	url := daemonOn(t, bin, root)
	mustPost(t, url, `{"action":"agent.create","params":{"agent_id":"a"}}`)
	mustPost(t, url, `{"action":"session.create","params":{"agent_id":"a","session_id":"s"}}`)
	mustPost(t, url, `{"action":"session.fence","params":{"agent_id":"a","session_id":"s","reason":"observer lost"}}`)
	for _, body := range []string{
		`{"action":"process.start","params":{"agent_id":"a","session_id":"s","argv":["/bin/true"]}}`,
		`{"action":"checkpoint.create","params":{"agent_id":"a","session_id":"s","checkpoint_id":"c"}}`,
		`{"action":"session.rollback","params":{"agent_id":"a","session_id":"s","checkpoint_id":"baseline"}}`,
	} {
		_, rerr := post(t, url, body)
		if rerr == nil || rerr.Code != rpc.CodeConflict || !strings.Contains(rerr.Message, "observer lost") {
			t.Errorf("%s on a fenced session: %+v, want conflict naming the reason", body, rerr)
		}
	}
	var s rpc.Session
	must(t, json.Unmarshal(mustPost(t, url, `{"action":"session.get","params":{"agent_id":"a","session_id":"s"}}`), &s))
	if s.Fenced == nil || s.Fenced.Reason != "observer lost" {
		t.Errorf("session.get does not show the fence: %+v", s)
	}
}

// daemonOn starts the daemon on a loopback port over root and stops it (SIGTERM) when the test ends.
func daemonOn(t testing.TB, bin, root string, extra ...string) string {
	t.Helper()
	cmd, wait, addrs := start(t, bin, 1, append([]string{"--root", root, "--listen", "127.0.0.1:0"}, extra...)...)
	t.Cleanup(func() {
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Error(err)
		}
		if err := wait(); err != nil {
			t.Errorf("daemon after SIGTERM: %v", err)
		}
	})
	return "http://" + addrs["loopback"]
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestRollbackWithLiveProcesses(t *testing.T) {
	root := btrfsRoot(t)
	url := daemonOn(t, build(t), root)
	mustPost(t, url, `{"action":"agent.create","params":{"agent_id":"a"}}`)
	mustPost(t, url, `{"action":"session.create","params":{"agent_id":"a","session_id":"s"}}`)
	var r rpc.Run
	must(t, json.Unmarshal(mustPost(t, url, `{"action":"process.start","params":{"agent_id":"a","session_id":"s","argv":["/bin/sh","-c","touch started; sleep 300 & sleep 300"]}}`), &r))

	// Without kill_processes the live run holds the lease: refused, nothing changed.
	_, rerr := post(t, url, `{"action":"session.rollback","params":{"agent_id":"a","session_id":"s","checkpoint_id":"baseline"}}`)
	if rerr == nil || rerr.Code != rpc.CodeConflict || !strings.Contains(rerr.Message, "kill_processes: true") {
		t.Fatalf("rollback with a live run: %+v, want conflict telling how to proceed", rerr)
	}
	var got rpc.Run
	must(t, json.Unmarshal(mustPost(t, url, `{"action":"process.get","params":{"run_id":"`+r.RunID+`"}}`), &got))
	if got.State != "running" {
		t.Fatalf("the refused rollback touched the run: %+v", got)
	}

	// With kill_processes the session's cgroup is killed (the background sleep too), then swapped.
	var s rpc.Session
	must(t, json.Unmarshal(mustPost(t, url, `{"action":"session.rollback","params":{"agent_id":"a","session_id":"s","checkpoint_id":"baseline","kill_processes":true}}`), &s))
	if s.LiveRuns != 0 {
		t.Errorf("live runs after a killing rollback: %d", s.LiveRuns)
	}
	must(t, json.Unmarshal(mustPost(t, url, `{"action":"process.wait","params":{"run_id":"`+r.RunID+`"}}`), &got))
	if got.State == "running" || got.State == "exited" && got.ExitCode != nil && *got.ExitCode == 0 {
		t.Errorf("run after the killing rollback: %+v", got)
	}
	if _, err := os.Stat(filepath.Join(root, "agents/a/workspace/sessions/s/current/started")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the run's file survived the rollback to the baseline: %v", err)
	}
}

func TestTurnCheckpointPolicy(t *testing.T) {
	root := btrfsRoot(t)
	url := daemonOn(t, build(t), root)
	mustPost(t, url, `{"action":"agent.create","params":{"agent_id":"a"}}`)
	mustPost(t, url, `{"action":"session.create","params":{"agent_id":"a","session_id":"on"}}`)
	mustPost(t, url, `{"action":"session.create","params":{"agent_id":"a","session_id":"off","turn_checkpoints":false}}`)
	for _, sess := range []string{"on", "off"} {
		mustPost(t, url, `{"action":"turn.begin","params":{"agent_id":"a","session_id":"`+sess+`","turn_id":"1"}}`)
		mustPost(t, url, `{"action":"turn.end","params":{"agent_id":"a","session_id":"`+sess+`","turn_id":"1","success":true}}`)
		mustPost(t, url, `{"action":"turn.end","params":{"agent_id":"a","session_id":"`+sess+`","turn_id":"2","success":false}}`)
	}
	ids := func(sess string) []string {
		var list struct{ Checkpoints []rpc.Checkpoint }
		must(t, json.Unmarshal(mustPost(t, url, `{"action":"checkpoint.list","params":{"agent_id":"a","session_id":"`+sess+`"}}`), &list))
		var out []string
		for _, c := range list.Checkpoints {
			out = append(out, c.CheckpointID+"<"+c.Parent)
		}
		return out
	}
	if got := strings.Join(ids("on"), " "); got != "baseline< turn-1<baseline" {
		t.Errorf("policy on: checkpoints %q, want the baseline and turn-1 after it", got)
	}
	if got := ids("off"); len(got) != 0 {
		t.Errorf("policy off: checkpoints %q, want none", got)
	}
}

// TestSeedCurlCommandsVerbatim runs the seed's four curl commands as written, against the daemon's
// loopback listener (only the port differs).
func TestSeedCurlCommandsVerbatim(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatal("curl is needed (apt-get install curl; ci/deps.sh installs it)")
	}
	root := btrfsRoot(t)
	url := daemonOn(t, build(t), root)
	for _, body := range []string{
		`{"action":"agent.create","params":{"agent_id":"agent-a"}}`,
		`{"action":"session.create","params":{"agent_id":"agent-a","session_id":"session-1"}}`,
		`{"action":"checkpoint.create","params":{"agent_id":"agent-a","session_id":"session-1","checkpoint_id":"clean"}}`,
		`{"action":"session.rollback","params":{"agent_id":"agent-a","session_id":"session-1","checkpoint_id":"clean"}}`,
	} {
		out, err := exec.Command("curl", "-sS", url+"/v1/rpc", "-H", "Content-Type: application/json", "-d", body).CombinedOutput()
		if err != nil || !strings.HasPrefix(string(out), `{"ok":true`) {
			t.Errorf("curl -d '%s':\n%s (%v)", body, out, err)
		}
	}
}
