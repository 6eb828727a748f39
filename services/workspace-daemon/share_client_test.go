package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/allox-os/allox/internal/rpc"
)

// runAs runs script with /bin/sh in agent/session and returns the run and its output.
func runAs(t *testing.T, url, agent, session, script string) (r rpc.Run, stdout, stderr string) {
	t.Helper()
	must(t, json.Unmarshal(mustPost(t, url, `{"action":"process.start","params":{"agent_id":"`+agent+`","session_id":"`+session+`","argv":["/bin/sh","-c",`+quote(script)+`]}}`), &r))
	must(t, json.Unmarshal(mustPost(t, url, `{"action":"process.wait","params":{"run_id":"`+r.RunID+`"}}`), &r))
	var out [2]rpc.Output
	for i, stream := range []string{"stdout", "stderr"} {
		must(t, json.Unmarshal(mustPost(t, url, `{"action":"process.output","params":{"run_id":"`+r.RunID+`","stream":"`+stream+`"}}`), &out[i]))
	}
	t.Logf("%s/%s: %s: %s %v\n%s--stderr--\n%s", agent, session, script, r.State, r.ExitCode, out[0].Data, out[1].Data)
	return r, out[0].Data, out[1].Data
}

// The client against the real daemon with the session-share plugin linked in and --share-tools:
// the seed's sequence from inside sandboxed runs (both enable; agent-a/session-1 reads
// agent-b/session-1's report.txt with allox share read, no shared keys), -o into the caller's
// current/, a write refused by a read-only scope and let by --scope output --permission write,
// and not-enabled refused in one line naming the target and path.
func TestShareClientOverDaemon(t *testing.T) {
	bin, err := goBuild("allox_session_share")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(filepath.Dir(bin)) })
	root := btrfsRoot(t)
	url := daemonOn(t, bin, root, withSessionSockets(t, []string{"--cgroup-parent", testCgroupParent(t), "--share-tools"})...)
	for _, a := range []string{"agent-a", "agent-b"} {
		mustPost(t, url, `{"action":"agent.create","params":{"agent_id":"`+a+`"}}`)
		mustPost(t, url, `{"action":"session.create","params":{"agent_id":"`+a+`","session_id":"session-1"}}`)
	}
	mustPost(t, url, `{"action":"session.create","params":{"agent_id":"agent-a","session_id":"quiet"}}`)
	const report = "findings\n"
	if r, _, _ := runAs(t, url, "agent-b", "session-1", "printf 'findings\\n' > report.txt"); !exited0(r) {
		t.Fatal("write report.txt")
	}
	if r, stdout, stderr := runAs(t, url, "agent-a", "session-1", "/run/allox/bin/allox share read agent-b/session-1 report.txt"); exited0(r) || stdout != "" ||
		!strings.Contains(stderr, "agent-b/session-1") || !strings.Contains(stderr, "report.txt") || strings.Count(stderr, "\n") != 1 {
		t.Errorf("read before enable: %+v, stdout %q, stderr %q", r, stdout, stderr)
	}
	for _, a := range []string{"agent-a", "agent-b"} {
		if r, _, stderr := runAs(t, url, a, "session-1", "/run/allox/bin/allox share enable"); !exited0(r) {
			t.Fatalf("%s enable: %s", a, stderr)
		}
	}
	if r, stdout, stderr := runAs(t, url, "agent-a", "session-1", "/run/allox/bin/allox share read agent-b/session-1 report.txt"); !exited0(r) || stdout != report {
		t.Errorf("read: %+v, stdout %q, stderr %q", r, stdout, stderr)
	}
	if r, stdout, stderr := runAs(t, url, "agent-a", "session-1", "/run/allox/bin/allox share read agent-b/session-1 report.txt -o copy.txt && cat copy.txt && ls"); !exited0(r) || stdout != report+"copy.txt\n" {
		t.Errorf("read -o: %+v, stdout %q, stderr %q", r, stdout, stderr)
	}
	for _, cmd := range []string{"status", "ls agent-b/session-1", "stat agent-b/session-1 report.txt"} {
		if r, stdout, stderr := runAs(t, url, "agent-a", "session-1", "/run/allox/bin/allox share "+cmd); !exited0(r) || !strings.HasPrefix(stdout, "{") {
			t.Errorf("%s: %+v, stdout %q, stderr %q", cmd, r, stdout, stderr)
		}
	}
	if r, _, stderr := runAs(t, url, "agent-b", "session-1", "echo hi | /run/allox/bin/allox share write agent-a/session-1 notes.txt"); exited0(r) || !strings.Contains(stderr, "agent-a/session-1") {
		t.Errorf("write to a read-only scope: %+v, stderr %q", r, stderr)
	}
	if r, _, stderr := runAs(t, url, "agent-a", "session-1", "mkdir -p output && /run/allox/bin/allox share enable --scope output --permission write"); !exited0(r) {
		t.Fatalf("enable --scope output --permission write: %s", stderr)
	}
	if r, stdout, stderr := runAs(t, url, "agent-b", "session-1", "echo hi | /run/allox/bin/allox share write agent-a/session-1 notes.txt && printf 'from a file' > f && /run/allox/bin/allox share write agent-a/session-1 f.txt -i f"); !exited0(r) || !strings.Contains(stdout, `"bytes": 3`) || !strings.Contains(stdout, `"bytes": 11`) {
		t.Errorf("write into output/: %+v, stdout %q, stderr %q", r, stdout, stderr)
	}
	for name, want := range map[string]string{"notes.txt": "hi\n", "f.txt": "from a file"} {
		if b, err := os.ReadFile(filepath.Join(root, "agents/agent-a/workspace/sessions/session-1/current/output", name)); err != nil || string(b) != want {
			t.Errorf("output/%s = %q, %v; want %q", name, b, err, want)
		}
	}
	if r, _, stderr := runAs(t, url, "agent-b", "session-1", "python3 /run/allox/share.py read agent-a/quiet x 2>&1 >&2 || /run/allox/bin/allox share read agent-a/quiet x"); exited0(r) || !strings.Contains(stderr, "agent-a/quiet") {
		t.Errorf("read of a session without share: %+v, stderr %q", r, stderr)
	}
}
