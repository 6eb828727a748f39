package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/allox-os/allox/internal/rpc"
)

// TestHostileSessionNeverStopsTheDaemon: a managed run (root) leaves a nested subvolume in one
// session's current/, and a crashed daemon leaves a rollback of it in the journal that cannot be
// finished. Checkpoints of it are refused naming the path, the daemon still starts, shows the
// quarantine in session.get and system.info, refuses the session's operations with the code
// "quarantined", serves the other session, and session.delete recovers it.
func TestHostileSessionNeverStopsTheDaemon(t *testing.T) {
	root := btrfsRoot(t)
	bin := build(t)
	args := []string{"--root", root, "--listen", "127.0.0.1:0"}
	cmd, wait, addrs := start(t, bin, 1, args...)
	url := "http://" + addrs["loopback"]
	mustPost(t, url, `{"action":"agent.create","params":{"agent_id":"a"}}`)
	for _, s := range []string{"s", "t"} {
		mustPost(t, url, `{"action":"session.create","params":{"agent_id":"a","session_id":"`+s+`","turn_checkpoints":false}}`)
	}
	var sess rpc.Session
	must(t, json.Unmarshal(mustPost(t, url, `{"action":"session.get","params":{"agent_id":"a","session_id":"s"}}`), &sess))
	if out, err := exec.Command("btrfs", "subvolume", "create", filepath.Join(sess.Current, "nested")).CombinedOutput(); err != nil {
		t.Fatalf("btrfs subvolume create: %v: %s", err, out)
	}
	_, rerr := post(t, url, `{"action":"checkpoint.create","params":{"agent_id":"a","session_id":"s","checkpoint_id":"c"}}`)
	if rerr == nil || rerr.Code != rpc.CodeConflict || !strings.Contains(rerr.Message, "current/nested is a nested Btrfs subvolume") {
		t.Errorf("checkpoint of a current/ holding a subvolume: %+v; want conflict naming current/nested", rerr)
	}
	mustPost(t, url, `{"action":"checkpoint.create","params":{"agent_id":"a","session_id":"t","checkpoint_id":"c"}}`)
	must(t, cmd.Process.Signal(syscall.SIGTERM))
	must(t, wait())

	// What a daemon killed in the middle of a rollback of s leaves, with current/ no longer
	// either copy the journal knows.
	txn := `{"id":"1-1","op":"rollback","agent_id":"a","session_id":"s","checkpoint_id":"c","step":"rollback.exchange","tmp":".rollback-1-1","old_id":1,"new_id":2}`
	must(t, os.WriteFile(filepath.Join(root, ".allox-state", "journal", "1-1.json"), []byte(txn), 0o600))

	url = daemonOn(t, bin, root)
	var info rpc.SystemInfo
	must(t, json.Unmarshal(mustPost(t, url, `{"action":"system.info","params":{}}`), &info))
	if len(info.Quarantined) != 1 || info.Quarantined[0].SessionID != "s" || info.Quarantined[0].Reason == "" {
		t.Fatalf("system.info quarantined = %+v; want session a/s with its reason", info.Quarantined)
	}
	must(t, json.Unmarshal(mustPost(t, url, `{"action":"session.get","params":{"agent_id":"a","session_id":"s"}}`), &sess))
	if sess.Quarantine == nil || sess.Quarantine.Since.IsZero() {
		t.Errorf("session.get does not show the quarantine: %+v", sess)
	}
	for _, body := range []string{
		`{"action":"process.start","params":{"agent_id":"a","session_id":"s","argv":["/bin/true"]}}`,
		`{"action":"checkpoint.create","params":{"agent_id":"a","session_id":"s","checkpoint_id":"c2"}}`,
	} {
		if _, rerr := post(t, url, body); rerr == nil || rerr.Code != rpc.CodeQuarantined || !strings.Contains(rerr.Message, "session.delete") {
			t.Errorf("%s on the quarantined session: %+v; want code quarantined saying how to recover", body, rerr)
		}
	}
	mustPost(t, url, `{"action":"session.rollback","params":{"agent_id":"a","session_id":"t","checkpoint_id":"c"}}`)
	mustPost(t, url, `{"action":"session.delete","params":{"agent_id":"a","session_id":"s"}}`)
	must(t, json.Unmarshal(mustPost(t, url, `{"action":"system.info","params":{}}`), &info))
	if len(info.Quarantined) != 0 {
		t.Errorf("quarantined after session.delete: %+v", info.Quarantined)
	}
	if _, err := os.Lstat(filepath.Dir(sess.Current)); !os.IsNotExist(err) {
		t.Errorf("deleted session's directory (with its nested subvolume) left: %v", err)
	}
}
