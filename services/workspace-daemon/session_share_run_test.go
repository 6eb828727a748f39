package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/allox-os/allox/internal/rpc"
	"github.com/allox-os/allox/services/internal/sessionshare"
)

// shareStreamPy is a session-share stream client in the run (until allox share speaks it): it
// sends the stream action on /run/allox/session.sock and prints the file read (share.read) or
// the Result line (share.write), or the refusal's code and message.
const shareStreamPy = `import json, socket, sys
action, params = sys.argv[1], json.loads(sys.argv[2])
data = sys.stdin.buffer.read() if action == "share.write" else b""
if action == "share.write": params["size"] = len(data)
s = socket.socket(socket.AF_UNIX); s.connect("/run/allox/session.sock")
body = json.dumps({"action": action, "params": params}).encode()
s.sendall(b"POST /v1/rpc HTTP/1.1\r\nHost: session\r\nContent-Type: application/json\r\nConnection: Upgrade\r\nUpgrade: allox-stream\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
f = s.makefile("rb")
status, length, chunked = f.readline(), 0, False
while True:
    h = f.readline()
    if h in (b"\r\n", b""): break
    if h.lower().startswith(b"content-length:"): length = int(h.split(b":")[1])
    if h.lower().startswith(b"transfer-encoding:") and b"chunked" in h.lower(): chunked = True
if b" 101 " not in status:
    body = f.read(length) if not chunked else f.read(int(f.readline().strip(), 16))
    e = json.loads(body)["error"]
    print("refused:", e["code"], e["message"]); sys.exit(1)
if action == "share.write":
    s.sendall(data); s.shutdown(socket.SHUT_WR)
    print(f.readline().decode().strip()); sys.exit(0)
size, n = json.loads(f.readline())["size"], 0
sys.stderr.write("streaming\n"); sys.stderr.flush()
while n < size:
    got = f.read(min(size - n, 1 << 20))
    if not got: break
    sys.stdout.buffer.write(got); n += len(got)
trailer = json.loads(f.readline())
assert trailer["ok"] and trailer["bytes"] == size == n, trailer
`

// TestSessionShareInARealRun checks the session-share plugin end to end, on a real store with
// real bubblewrap, through the daemon built as mkimage builds it for plugins = ["session-share"]:
// two agents, three sessions; the seed's sequence (both enable, then agent-a/session-1 reads
// agent-b/session-1's report.txt) from inside a run over the session socket; a session that does
// not share is refused both ways; read-only refuses a write; a write share takes one, owned by the
// runs; a 256 MiB read streams with the daemon's peak RSS bounded; a session.rollback of the
// target waits for a read in progress, which gets every byte, and a read while it waits is
// refused (target busy); a refused escape is audited; disable takes effect for the next request.
func TestSessionShareInARealRun(t *testing.T) {
	root := btrfsRoot(t)
	bin, err := builtSessionShare()
	must(t, err)
	cmd, wait, addrs := start(t, bin, 1, "--root", root, "--listen", "127.0.0.1:0", "--share-tools")
	t.Cleanup(func() {
		must(t, cmd.Process.Signal(syscall.SIGTERM))
		if err := wait(); err != nil {
			t.Errorf("daemon after SIGTERM: %v", err)
		}
	})
	loop := "http://" + addrs["loopback"]
	mustPost(t, loop, `{"action":"agent.create","params":{"agent_id":"agent-a"}}`)
	mustPost(t, loop, `{"action":"agent.create","params":{"agent_id":"agent-b"}}`)
	for _, as := range [][2]string{{"agent-a", "session-1"}, {"agent-b", "session-1"}, {"agent-b", "session-2"}} {
		mustPost(t, loop, `{"action":"session.create","params":{"agent_id":"`+as[0]+`","session_id":"`+as[1]+`"}}`)
	}
	runIn := func(as, script string) (rpc.Run, string) {
		t.Helper()
		agent, session, _ := strings.Cut(as, "/")
		var r rpc.Run
		must(t, json.Unmarshal(mustPost(t, loop, `{"action":"process.start","params":{"agent_id":"`+agent+`","session_id":"`+session+
			`","argv":["/bin/sh","-c",`+quote("cat > /tmp/s.py <<'EOF'\n"+shareStreamPy+"EOF\n"+script)+`]}}`), &r))
		must(t, json.Unmarshal(mustPost(t, loop, `{"action":"process.wait","params":{"run_id":"`+r.RunID+`"}}`), &r))
		var out rpc.Output
		must(t, json.Unmarshal(mustPost(t, loop, `{"action":"process.output","params":{"run_id":"`+r.RunID+`"}}`), &out))
		return r, out.Data
	}
	py := func(action, target, path string) string {
		return "python3 /tmp/s.py " + action + " '" + `{"target":"` + target + `","path":"` + path + `"}` + "'"
	}
	const a, b1, b2 = "agent-a/session-1", "agent-b/session-1", "agent-b/session-2"

	if r, out := runIn(b1, "echo 'report of b1' > report.txt; mkdir -p output; echo result > output/r.txt"); !exited0(r) {
		t.Fatalf("setting up %s: %+v %q", b1, r, out)
	}
	if _, out := runIn(a, "/run/allox/bin/allox call share.enable; "+py("share.read", b1, "report.txt")); !strings.Contains(out, `"enabled": true`) ||
		!strings.Contains(out, "refused: forbidden share.read agent-b/session-1 report.txt: not enabled: the target") {
		t.Fatalf("a enables, reads b1 which does not share: %q", out)
	}
	if r, out := runIn(b1, "/run/allox/bin/allox call share.enable"); !exited0(r) {
		t.Fatalf("b1 enables: %+v %q", r, out)
	}
	if r, out := runIn(a, py("share.read", b1, "report.txt")); !exited0(r) || out != "report of b1\n" {
		t.Fatalf("the seed's read: %+v %q", r, out)
	}
	if _, out := runIn(b2, py("share.read", b1, "report.txt")); !strings.Contains(out, "refused: forbidden") || !strings.Contains(out, "not enabled: your session agent-b/session-2") {
		t.Errorf("a session that does not share reads: %q", out)
	}
	if _, out := runIn(b1, py("share.read", b2, "report.txt")); !strings.Contains(out, "not enabled: the target") {
		t.Errorf("reading a session that does not share: %q", out)
	}
	if _, out := runIn(a, "echo x | "+py("share.write", b1, "w.txt")); !strings.Contains(out, "refused: forbidden share.write agent-b/session-1 w.txt: read-only") {
		t.Errorf("a write into a read-only share: %q", out)
	}
	if _, out := runIn(a, py("share.read", b1, "../../etc/passwd")); !strings.Contains(out, "outside the scope") {
		t.Errorf("an escape: %q", out)
	}
	if _, out := runIn(a, "/run/allox/bin/allox call share.ls '{\"target\":\"agent-b/session-1\",\"path\":\"output\"}'"); !strings.Contains(out, `"name": "r.txt"`) {
		t.Errorf("share.ls through allox call: %q", out)
	}

	// Write permission, scope output: a's write lands in b1's output/, owned by the runs.
	if r, out := runIn(b1, `/run/allox/bin/allox call share.enable '{"scope":"output","permission":"write"}'`); !exited0(r) {
		t.Fatalf("b1 enables a write share of output: %+v %q", r, out)
	}
	if _, out := runIn(a, py("share.read", b1, "report.txt")); !strings.Contains(out, "refused: not_found") {
		t.Errorf("report.txt outside scope output: %q", out)
	}
	if _, out := runIn(a, "printf 'from a' | "+py("share.write", b1, "from-a.txt")); !strings.Contains(out, `{"ok":true,"bytes":6}`) {
		t.Fatalf("a write into the write share: %q", out)
	}
	if r, out := runIn(b1, `cat output/from-a.txt; echo; [ "$(stat -c %u:%g output/from-a.txt)" = "$(id -u):$(id -g)" ] && echo owned by the runs`); !exited0(r) || out != "from a\nowned by the runs\n" {
		t.Errorf("b1 sees a's write: %+v %q", r, out)
	}

	// A 1 GiB read (the default bound of one read) streams through the daemon with its memory
	// bounded: its peak RSS, VmHWM, grows by less than 64 MiB. The 1 GiB file is sparse (the
	// store is 1 GiB): what is measured is the daemon's memory, and a hole is read through the
	// same read(2)s as data. The 256 MiB file of random bytes is the rollback test's below.
	if r, out := runIn(b1, "head -c 268435456 /dev/urandom > output/big && truncate -s 1073741824 output/huge"); !exited0(r) {
		t.Fatalf("writing the large files: %+v %q", r, out)
	}
	hwm := func() int64 {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
		must(t, err)
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
				n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				must(t, err)
				return n << 10
			}
		}
		t.Fatal("no VmHWM in the daemon's status")
		return 0
	}
	before := hwm()
	if r, out := runIn(a, py("share.read", b1, "huge")+" | wc -c"); !exited0(r) || out != "1073741824\n" {
		t.Fatalf("the 1 GiB read: %+v %q", r, out)
	}
	if grew := hwm() - before; grew > 64<<20 {
		t.Errorf("the daemon's peak RSS grew by %d MiB during a 1 GiB read: it must stream", grew>>20)
	} else {
		t.Logf("1 GiB read through the daemon: its peak RSS grew by %d KiB (from %d MiB)", grew>>10, before>>20)
	}

	// Rollback versus a read in progress: the rollback of the target waits for the read's end
	// (the reader gets every byte), and while it waits a new share access is refused.
	mustPost(t, loop, `{"action":"checkpoint.create","params":{"agent_id":"agent-b","session_id":"session-1","checkpoint_id":"c1"}}`)
	var slow rpc.Run
	must(t, json.Unmarshal(mustPost(t, loop, `{"action":"process.start","params":{"agent_id":"agent-a","session_id":"session-1","argv":["/bin/sh","-c",`+
		quote("cat > /tmp/s.py <<'EOF'\n"+shareStreamPy+"EOF\n"+py("share.read", b1, "big")+" | (sleep 3; wc -c)")+`]}}`), &slow))
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var e rpc.Output
		must(t, json.Unmarshal(mustPost(t, loop, `{"action":"process.output","params":{"run_id":"`+slow.RunID+`","stream":"stderr"}}`), &e))
		if strings.Contains(e.Data, "streaming") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the slow read never started streaming: %q", e.Data)
		}
	}
	rolled := make(chan time.Duration, 1)
	go func() {
		start := time.Now()
		if _, rerr := call(t, loop, "", "session.rollback", `{"agent_id":"agent-b","session_id":"session-1","checkpoint_id":"c1"}`); rerr != nil {
			t.Errorf("session.rollback during the read: %v", rerr)
		}
		rolled <- time.Since(start)
	}()
	time.Sleep(500 * time.Millisecond)
	if _, out := runIn(a, py("share.read", b1, "output/r.txt")); !strings.Contains(out, "refused: conflict") || !strings.Contains(out, "target busy") {
		t.Errorf("a read while the target's rollback waits: %q, want conflict (target busy)", out)
	}
	must(t, json.Unmarshal(mustPost(t, loop, `{"action":"process.wait","params":{"run_id":"`+slow.RunID+`"}}`), &slow))
	var slowOut rpc.Output
	must(t, json.Unmarshal(mustPost(t, loop, `{"action":"process.output","params":{"run_id":"`+slow.RunID+`"}}`), &slowOut))
	if !exited0(slow) || slowOut.Data != "268435456\n" {
		t.Errorf("the read the rollback waited for: %+v %q, want every byte", slow, slowOut.Data)
	}
	select {
	case d := <-rolled:
		if d < 2*time.Second {
			t.Errorf("session.rollback returned after %v, before the read in progress ended", d)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("session.rollback still waits 30 s after the read ended")
	}
	if _, out := runIn(a, py("share.read", b1, "output/big")); !strings.Contains(out, "refused: not_found") {
		t.Errorf("after the rollback big is gone: %q", out)
	}

	// Disable: the next request is refused.
	if r, out := runIn(b1, "/run/allox/bin/allox call share.disable"); !exited0(r) {
		t.Fatalf("b1 disables: %+v %q", r, out)
	}
	if _, out := runIn(a, py("share.read", b1, "r.txt")); !strings.Contains(out, "not enabled: the target") {
		t.Errorf("read after b1 disabled: %q", out)
	}

	recs, err := sessionshare.ReadAudit(filepath.Join(root, ".allox-state", "plugins", "session-share", "audit"))
	must(t, err)
	var escape, seed bool
	for _, r := range recs {
		escape = escape || (r.Decision == sessionshare.Denied && r.Path == "../../etc/passwd" && r.AgentID == "agent-a" && r.Target == b1)
		seed = seed || (r.Decision == sessionshare.Allowed && r.Action == "share.read" && r.Path == "report.txt" && r.Bytes == int64(len("report of b1\n")))
	}
	if !escape || !seed {
		t.Errorf("audit (%d records): escape refused %v, seed's read %v; want both", len(recs), escape, seed)
	}
	if _, err := os.Stat(filepath.Join(root, ".allox-state", "plugins", "session-share", "sessions")); err != nil {
		t.Errorf("the share state dir: %v", err)
	}
}

// builtSessionShare is the daemon built with the session-share plugin linked in.
var builtSessionShare = sync.OnceValues(func() (string, error) { return goBuild("allox_session_share") })
