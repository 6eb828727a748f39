package main

import (
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/allox-os/allox/internal/rpc"
)

// runIn starts argv in the session, waits for it and returns its state, exit code and stderr.
func runIn(t *testing.T, url, session, script string) (rpc.Run, string) {
	t.Helper()
	var r rpc.Run
	must(t, json.Unmarshal(mustPost(t, url, `{"action":"process.start","params":{"agent_id":"a","session_id":"`+session+`","argv":["/bin/sh","-c",`+quote(script)+`]}}`), &r))
	must(t, json.Unmarshal(mustPost(t, url, `{"action":"process.wait","params":{"run_id":"`+r.RunID+`"}}`), &r))
	var out rpc.Output
	must(t, json.Unmarshal(mustPost(t, url, `{"action":"process.output","params":{"run_id":"`+r.RunID+`","stream":"stderr"}}`), &out))
	return r, out.Data
}

// stoppable starts the daemon over root and returns its URL and a stop (SIGTERM, exit 0).
func stoppable(t *testing.T, bin, root string, flags ...string) (string, func()) {
	t.Helper()
	cmd, wait, addrs := start(t, bin, 1, append([]string{"--root", root, "--listen", "127.0.0.1:0"}, flags...)...)
	return "http://" + addrs["loopback"], func() {
		t.Helper()
		must(t, cmd.Process.Signal(syscall.SIGTERM))
		must(t, wait())
	}
}

func quote(s string) string { b, _ := json.Marshal(s); return string(b) }

func exited0(r rpc.Run) bool { return r.State == "exited" && r.ExitCode != nil && *r.ExitCode == 0 }

func getSession(t *testing.T, url, session string) rpc.Session {
	t.Helper()
	var s rpc.Session
	must(t, json.Unmarshal(mustPost(t, url, `{"action":"session.get","params":{"agent_id":"a","session_id":"`+session+`"}}`), &s))
	return s
}

// A session's run that fills its quota gets EDQUOT; the other session's process.start, checkpoint
// and rollback keep working; session.get and agent.get report limits and usage, which survive a
// restart; session.create's quota is bounded, naming params.quota.
func TestSessionQuotaOverRPC(t *testing.T) {
	root := btrfsRoot(t)
	bin := build(t)
	flags := []string{"--session-quota=64MiB", "--max-session-quota=128MiB", "--agent-quota=512MiB", "--store-reserve=128MiB"}
	url, stop := stoppable(t, bin, root, append(flags, "--turn-checkpoints")...)
	mustPost(t, url, `{"action":"agent.create","params":{"agent_id":"a"}}`)
	_, rerr := post(t, url, `{"action":"session.create","params":{"agent_id":"a","session_id":"big","quota":268435456}}`)
	if rerr == nil || rerr.Field != "params.quota" || !strings.Contains(rerr.Message, "max_session_quota") {
		t.Fatalf("session.create above max_session_quota: %+v, want an error naming params.quota", rerr)
	}
	mustPost(t, url, `{"action":"session.create","params":{"agent_id":"a","session_id":"full","quota":33554432}}`)
	mustPost(t, url, `{"action":"session.create","params":{"agent_id":"a","session_id":"other"}}`)

	r, stderr := runIn(t, url, "full", "dd if=/dev/zero of=fill bs=1M count=64 conv=fsync")
	if exited0(r) || !strings.Contains(stderr, "Disk quota exceeded") {
		t.Fatalf("dd of 64 MiB in a 32 MiB session: %+v %q, want EDQUOT", r, stderr)
	}
	if r, stderr := runIn(t, url, "other", "dd if=/dev/zero of=data bs=1M count=16 conv=fsync && sync -f ."); !exited0(r) {
		t.Fatalf("the other session's run: %+v %q", r, stderr)
	}
	mustPost(t, url, `{"action":"checkpoint.create","params":{"agent_id":"a","session_id":"other","checkpoint_id":"c1"}}`)
	mustPost(t, url, `{"action":"session.rollback","params":{"agent_id":"a","session_id":"other","checkpoint_id":"baseline"}}`)

	if q := getSession(t, url, "full").Quota; q == nil || q.Limit != 32<<20 || q.Used < 16<<20 {
		t.Errorf("session.get of the full session: quota %+v, want limit 32 MiB and its usage", q)
	}
	if q := getSession(t, url, "other").Quota; q == nil || q.Limit != 64<<20 || q.Used < 16<<20 {
		t.Errorf("session.get of the other session: quota %+v, want the default 64 MiB and c1's 16 MiB", q)
	}
	var a rpc.Agent
	must(t, json.Unmarshal(mustPost(t, url, `{"action":"agent.get","params":{"agent_id":"a"}}`), &a))
	if a.Quota == nil || a.Quota.Limit != 512<<20 || a.Quota.Used < 32<<20 {
		t.Errorf("agent.get: quota %+v, want limit 512 MiB and both sessions' usage", a.Quota)
	}

	// Restart with another default: the recorded limits stay.
	stop()
	url = daemonOn(t, bin, root, "--session-quota=96MiB", "--max-session-quota=128MiB", "--store-reserve=128MiB", "--turn-checkpoints")
	if q := getSession(t, url, "full").Quota; q == nil || q.Limit != 32<<20 {
		t.Errorf("after restart: quota %+v, want the recorded 32 MiB", q)
	}
	if r, stderr := runIn(t, url, "full", "dd if=/dev/zero of=fill2 bs=1M count=64 conv=fsync"); exited0(r) || !strings.Contains(stderr, "Disk quota exceeded") {
		t.Errorf("after restart, dd into the full session: %+v %q, want EDQUOT", r, stderr)
	}
}

// With the store full for agents (the all-agents qgroup at its limit), process.start still works
// (its run record is daemon state, in the reserve), and so do checkpoint.delete, session.rollback,
// session.delete, agent.delete and a restart of the daemon.
func TestStoreFullOverRPC(t *testing.T) {
	root := btrfsRoot(t)
	bin := build(t)
	url, stop := stoppable(t, bin, root, "--store-reserve=256MiB", "--turn-checkpoints")
	for _, p := range []string{
		`{"action":"agent.create","params":{"agent_id":"a"}}`,
		`{"action":"agent.create","params":{"agent_id":"b"}}`,
		`{"action":"session.create","params":{"agent_id":"a","session_id":"fill"}}`,
		`{"action":"session.create","params":{"agent_id":"a","session_id":"other"}}`,
		`{"action":"session.create","params":{"agent_id":"b","session_id":"sb"}}`,
	} {
		mustPost(t, url, p)
	}
	r, stderr := runIn(t, url, "fill", "dd if=/dev/zero of=fill bs=1M count=4096 conv=fsync")
	if exited0(r) || !strings.Contains(stderr, "Disk quota exceeded") {
		t.Fatalf("filling the store: %+v %q, want EDQUOT from the all-agents limit before ENOSPC", r, stderr)
	}
	mustPost(t, url, `{"action":"checkpoint.create","params":{"agent_id":"a","session_id":"fill","checkpoint_id":"full"}}`)
	if r, stderr := runIn(t, url, "other", "echo hi; dd if=/dev/zero of=x bs=1M count=8 conv=fsync"); r.State != "exited" || !strings.Contains(stderr, "Disk quota exceeded") {
		t.Errorf("a run in another session of the full store: %+v %q, want it to run and get EDQUOT", r, stderr)
	}
	mustPost(t, url, `{"action":"checkpoint.delete","params":{"agent_id":"a","session_id":"fill","checkpoint_id":"full"}}`)
	mustPost(t, url, `{"action":"session.rollback","params":{"agent_id":"a","session_id":"fill","checkpoint_id":"baseline"}}`)
	mustPost(t, url, `{"action":"session.delete","params":{"agent_id":"b","session_id":"sb"}}`)
	mustPost(t, url, `{"action":"agent.delete","params":{"agent_id":"b"}}`)
	stop()
	url = daemonOn(t, bin, root, "--store-reserve=256MiB", "--turn-checkpoints")
	// The deletes woke Btrfs's cleaner (the store was nearly full); give it a few seconds.
	for i := 0; ; i++ {
		r, stderr := runIn(t, url, "other", "dd if=/dev/zero of=x bs=1M count=8 conv=fsync")
		if exited0(r) {
			break
		}
		if i == 20 {
			t.Fatalf("writes still fail 10 s after the rollback and the deletes freed the space: %+v %q", r, stderr)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
