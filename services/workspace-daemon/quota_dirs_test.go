package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/allox-os/allox/internal/rpc"
)

// runWith is runIn with extra process.start params (e.g. `"managed":true`).
func runWith(t *testing.T, url, session, extra, script string) (rpc.Run, string) {
	t.Helper()
	var r rpc.Run
	must(t, json.Unmarshal(mustPost(t, url, `{"action":"process.start","params":{"agent_id":"a","session_id":"`+session+`",`+extra+`,"argv":["/bin/sh","-c",`+quote(script)+`]}}`), &r))
	must(t, json.Unmarshal(mustPost(t, url, `{"action":"process.wait","params":{"run_id":"`+r.RunID+`"}}`), &r))
	var out rpc.Output
	must(t, json.Unmarshal(mustPost(t, url, `{"action":"process.output","params":{"run_id":"`+r.RunID+`","stream":"stderr"}}`), &out))
	return r, out.Data
}

// A sandboxed run that fills its private /tmp beyond its session's quota gets EDQUOT, and
// another session's process.start and checkpoint.create still work.
func TestRunTmpQuotaOverRPC(t *testing.T) {
	root := btrfsRoot(t)
	bin := build(t)
	url := daemonOn(t, bin, root, "--session-quota=32MiB", "--agent-quota=512MiB", "--store-reserve=128MiB")
	mustPost(t, url, `{"action":"agent.create","params":{"agent_id":"a"}}`)
	for _, s := range []string{"full", "other"} {
		mustPost(t, url, `{"action":"session.create","params":{"agent_id":"a","session_id":"`+s+`","turn_checkpoints":false}}`)
	}
	r, stderr := runIn(t, url, "full", "dd if=/dev/zero of=/tmp/fill bs=1M count=64 conv=fsync")
	if exited0(r) || !strings.Contains(stderr, "Disk quota exceeded") {
		t.Fatalf("dd of 64 MiB into /tmp of a 32 MiB session: %+v %q, want EDQUOT", r, stderr)
	}
	if r, stderr := runIn(t, url, "other", "dd if=/dev/zero of=/tmp/x bs=1M count=8 conv=fsync && echo hi > kept"); !exited0(r) {
		t.Fatalf("the other session's run: %+v %q", r, stderr)
	}
	mustPost(t, url, `{"action":"checkpoint.create","params":{"agent_id":"a","session_id":"other","checkpoint_id":"c1"}}`)
	mustPost(t, url, `{"action":"checkpoint.create","params":{"agent_id":"a","session_id":"full","checkpoint_id":"c1"}}`)
}

// A managed run (root) that fills the agent's shared/ beyond the agent's quota gets EDQUOT, and
// another agent's runs still work; system.info reports the store-wide quota with its reserve.
func TestSharedQuotaOverRPC(t *testing.T) {
	root := btrfsRoot(t)
	bin := build(t)
	url := daemonOn(t, bin, root, "--agent-quota=64MiB", "--store-reserve=128MiB", "--managed-execution")
	mustPost(t, url, `{"action":"agent.create","params":{"agent_id":"a"}}`)
	mustPost(t, url, `{"action":"session.create","params":{"agent_id":"a","session_id":"s","turn_checkpoints":false}}`)
	r, stderr := runWith(t, url, "s", `"managed":true`, `dd if=/dev/zero of="$ALLOX_AGENT_SHARED/fill" bs=1M count=128 conv=fsync`)
	if exited0(r) || !strings.Contains(stderr, "Disk quota exceeded") {
		t.Fatalf("managed dd of 128 MiB into shared/ of a 64 MiB agent: %+v %q, want EDQUOT", r, stderr)
	}
	mustPost(t, url, `{"action":"agent.create","params":{"agent_id":"b"}}`)
	mustPost(t, url, `{"action":"session.create","params":{"agent_id":"b","session_id":"s","turn_checkpoints":false}}`)
	var rb rpc.Run
	must(t, json.Unmarshal(mustPost(t, url, `{"action":"process.start","params":{"agent_id":"b","session_id":"s","argv":["/bin/sh","-c","dd if=/dev/zero of=x bs=1M count=16 conv=fsync"]}}`), &rb))
	must(t, json.Unmarshal(mustPost(t, url, `{"action":"process.wait","params":{"run_id":"`+rb.RunID+`"}}`), &rb))
	if !exited0(rb) {
		t.Errorf("agent b's run beside agent a's full shared/: %+v", rb)
	}
	mustPost(t, url, `{"action":"checkpoint.create","params":{"agent_id":"b","session_id":"s","checkpoint_id":"c1"}}`)
	var a rpc.Agent
	must(t, json.Unmarshal(mustPost(t, url, `{"action":"agent.get","params":{"agent_id":"a"}}`), &a))
	if a.Quota == nil || a.Quota.Used < 32<<20 || len(a.Quota.Unlimited) != 0 {
		t.Errorf("agent.get: quota %+v, want shared/'s writes charged and nothing unlimited", a.Quota)
	}

	var info rpc.SystemInfo
	must(t, json.Unmarshal(mustPost(t, url, `{"action":"system.info","params":{}}`), &info))
	if q := info.Store.Quota; q == nil || q.Qgroup != "3/1" || q.Reserve != 128<<20 || q.Limit == 0 || q.Used < 32<<20 {
		t.Errorf("system.info store quota = %+v, want 3/1 with a limit, the agents' usage and reserve 128 MiB", q)
	}
}
