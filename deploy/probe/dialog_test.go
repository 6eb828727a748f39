package probe

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/allox-os/allox/deploy/probe/internal/gateway"
	"github.com/allox-os/allox/deploy/probe/internal/wire"
	"github.com/allox-os/allox/internal/btrfstest"
	"github.com/allox-os/allox/internal/daemontest"
	"github.com/allox-os/allox/internal/rpc"
)

// The daemon with the dialog plugin, and the in-sandbox client its runs ask with.
var dialogBins = sync.OnceValues(func() ([2]string, error) {
	d, err := daemontest.Build("allox_dialog")
	if err != nil {
		return [2]string{}, err
	}
	c, err := daemontest.BuildClient()
	builtDirs = append(builtDirs, filepath.Dir(d), filepath.Dir(c))
	return [2]string{d, c}, err
})

// builtDirs are removed when the tests end (TestMain).
var builtDirs []string

func dialogProbe(t *testing.T, f *fleet, host, gateways, store string) *probeHost {
	t.Helper()
	b, err := dialogBins()
	if err != nil {
		t.Fatal(err)
	}
	return f.probe(host, gateways, store, 2, "--workspace-daemon", b[0], "--client", b[1], "--daemon-flag=--dialog", "--dialog")
}

const dialogSpec = `
devbox "alpha" {
  runtime = "process"
  agent   = "main"
  session "s1" {}
  session "s2" {
    dialog_rule "auto" {
      kind   = "permission"
      prompt = "^auto: "
      answer = "allow"
    }
  }
}
`

func marker(t *testing.T, what string) string {
	var b [12]byte
	rand.Read(b[:])
	return what + "-" + hex.EncodeToString(b[:])
}

// sandboxRPC is the host listener of devbox's daemon, as the Probe's Workspace Bridge uses it.
func sandboxRPC(t *testing.T, h *probeHost, devbox string) *rpc.Client {
	endpoint, token, _ := h.sandbox(t, devbox)
	return rpc.NewClient(endpoint, token, &http.Client{Timeout: 90 * time.Second})
}

// ask starts a run in session that asks with the prompt and options the session's workspace
// holds in files (a run's command line is recorded; its files are the agent's own).
func ask(t *testing.T, c *rpc.Client, root, session, prompt, option, flags string) rpc.Run {
	t.Helper()
	dir := filepath.Join(root, "agents/main/workspace/sessions", session, "current")
	if err := os.WriteFile(filepath.Join(dir, "prompt.txt"), []byte(prompt), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "option.txt"), []byte(option), 0o644); err != nil {
		t.Fatal(err)
	}
	var r rpc.Run
	// The run's output is recorded: it prints which option it got, not the answer itself.
	script := `a=$(/run/allox/bin/allox dialog ask --option "$(cat option.txt)" --option no --default no ` + flags + ` - <prompt.txt) || exit 1
case "$a" in "$(cat option.txt)") echo got-option ;; no) echo got-no ;; *) echo got-other ;; esac`
	if err := c.Call(t.Context(), "process.start", map[string]any{"agent_id": "main", "session_id": session, "argv": []string{"/bin/sh", "-c", script}}, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// output waits for the run and returns what it printed.
func output(t *testing.T, c *rpc.Client, r rpc.Run) string {
	t.Helper()
	if err := c.Call(t.Context(), "process.wait", map[string]any{"run_id": r.RunID, "timeout": 60}, &r); err != nil {
		t.Fatal(err)
	}
	var out rpc.Output
	if err := c.Call(t.Context(), "process.output", map[string]any{"run_id": r.RunID}, &out); err != nil {
		t.Fatal(err)
	}
	return string(out.Data)
}

// dialogItems is `gateway dialog ls` through the CLI.
func dialogItems(t *testing.T, f *fleet, url string, all bool) []wire.DialogItem {
	t.Helper()
	args := []string{"dialog", "ls"}
	if all {
		args = append(args, "--all")
	}
	out, err := execGatewayDialog(f, url, args...)
	if err != nil {
		t.Fatalf("gateway dialog ls: %v\n%s", err, out)
	}
	var items []wire.DialogItem
	if err := json.Unmarshal([]byte(out), &items); err != nil {
		t.Fatalf("gateway dialog ls: %v\n%s", err, out)
	}
	return items
}

func execGatewayDialog(f *fleet, url string, args ...string) (string, error) {
	out, err := execCmd(bins(f.t)["gateway"], append([]string{args[0], args[1], "--gateway", url, "--pki", f.pki}, args[2:]...)...)
	return out, err
}

// waitItem waits until the replica at url lists an open request whose content is prompt.
func waitItem(t *testing.T, f *fleet, url, prompt string) wire.DialogItem {
	t.Helper()
	var got wire.DialogItem
	eventually(t, "the request listed with its content", func() bool {
		for _, it := range dialogItems(t, f, url, false) {
			if it.Content != nil && it.Content.Prompt == prompt {
				got = it
				return true
			}
		}
		return false
	})
	return got
}

func answerCLI(f *fleet, url, devbox, session, id, choice string) (string, error) {
	return execGatewayDialog(f, url, "dialog", "answer", "--devbox", devbox, "--session", session, id, choice)
}

func itemOf(t *testing.T, f *fleet, url, id string) wire.DialogItem {
	t.Helper()
	for _, it := range dialogItems(t, f, url, true) {
		if it.RequestID == id {
			return it
		}
	}
	t.Fatalf("request %s not listed", id)
	return wire.DialogItem{}
}

// The dialog relay with real processes: a run's question goes up from the appliance through the
// Probe to the Gateway, a person answers with `gateway dialog answer`, and the run gets the answer;
// refusals (another session's id, an unknown id, a choice that is not an option, a second answer)
// change nothing; a timeout takes the default and a later answer is refused as late; a session's
// dialog_rule answers on the Gateway's behalf; and the message content is nowhere in the etcd
// data, the audit, the Probe's state, the daemon's state or any process's log.
func TestDialogThroughGateway(t *testing.T) {
	needBtrfs(t)
	store := btrfstest.Mount(t)
	f := newFleet(t)
	gwURL, _, gw := f.gateway("a", "")
	h := dialogProbe(t, f, "host-a", gwURL, store)
	a := f.admin(gwURL)
	runGatewayCLI(t, f, gwURL, "apply", writeSpec(t, dialogSpec))
	eventually(t, "alpha running", running(t, a, "alpha", "host-a"))
	c := sandboxRPC(t, h, "alpha")
	root := filepath.Join(store, "host-a", "alpha")

	prompt, choice := marker(t, "prompt"), marker(t, "choice")
	r := ask(t, c, root, "s1", prompt, choice, "--timeout 120")
	it := waitItem(t, f, gwURL, prompt)
	if it.DevBox != "alpha" || it.Session != "s1" || it.Agent != "main" || it.Kind != "permission" || it.RunID != r.RunID ||
		it.PromptBytes != len(prompt) || it.Options != 2 || it.Outcome != wire.DialogOpen || it.Host != "host-a" {
		t.Fatalf("the listed request %+v: want alpha/s1's permission request of run %s, open, with its sizes", it.DialogRecord, r.RunID)
	}
	if d := it.Deadline.Sub(it.Asked); d < 119*time.Second || d > 121*time.Second {
		t.Errorf("deadline %s after asking, want the question's 120 s", d)
	}
	if it.Content.Default != "no" || strings.Join(it.Content.Options, ",") != choice+",no" {
		t.Errorf("content %+v", it.Content)
	}

	// Refusals, each changing nothing.
	for _, tc := range []struct {
		session, id, choice, want string
	}{
		{"s2", it.RequestID, choice, "is not a request of session alpha/s2"},
		{"s1", "q-00000000deadbeef", choice, `no dialog request "q-00000000deadbeef"`},
		{"s1", it.RequestID, "maybe", "is not one of the request's options"},
	} {
		out, err := answerCLI(f, gwURL, "alpha", tc.session, tc.id, tc.choice)
		if err == nil || !strings.Contains(out, tc.want) {
			t.Errorf("answer %s %s %s: %v %s, want a refusal saying %q", tc.session, tc.id, tc.choice, err, out, tc.want)
		}
	}
	if got := itemOf(t, f, gwURL, it.RequestID); got.Outcome != wire.DialogOpen {
		t.Fatalf("after the refusals the request is %s, want open", got.Outcome)
	}

	out, err := answerCLI(f, gwURL, "alpha", "s1", it.RequestID, choice)
	if err != nil || !strings.Contains(out, `"outcome": "answered"`) || !strings.Contains(out, `"by": "admin:admin"`) {
		t.Fatalf("gateway dialog answer: %v\n%s", err, out)
	}
	if got := output(t, c, r); got != "got-option\n" {
		t.Fatalf("the asking run got %q, want the person's answer", got)
	}
	if out, err := answerCLI(f, gwURL, "alpha", "s1", it.RequestID, "no"); err == nil || !strings.Contains(out, "was answered already (by admin:admin") {
		t.Errorf("a second answer: %v %s, want a refusal naming the first", err, out)
	}
	eventually(t, "the outcome recorded", func() bool {
		got := itemOf(t, f, gwURL, it.RequestID)
		return got.Outcome == wire.DialogAnswered && got.By == "admin:admin" && got.AnswerBytes == len(choice) && got.Content == nil
	})

	// Nobody answers: the default, then a late answer refused and recorded.
	prompt2 := marker(t, "prompt")
	r2 := ask(t, c, root, "s1", prompt2, choice, "--timeout 3")
	it2 := waitItem(t, f, gwURL, prompt2)
	if got := output(t, c, r2); got != "got-no\n" {
		t.Fatalf("the timed-out run got %q, want the default", got)
	}
	out, err = answerCLI(f, gwURL, "alpha", "s1", it2.RequestID, choice)
	if err == nil || !strings.Contains(out, "passed its deadline") || !strings.Contains(out, "recorded as late") {
		t.Fatalf("a late answer: %v %s, want it refused as late", err, out)
	}
	eventually(t, "the default and the late answer recorded", func() bool {
		got := itemOf(t, f, gwURL, it2.RequestID)
		return got.Outcome == wire.DialogDefault && got.Late == 1
	})

	// The policy of session s2 answers its matching request; nobody is asked.
	prompt3 := "auto: " + marker(t, "prompt")
	r3 := ask(t, c, root, "s2", prompt3, "allow", "--timeout 120")
	if got := output(t, c, r3); got != "got-option\n" {
		t.Fatalf("the policy's request got %q, want allow", got)
	}
	var it3 wire.DialogItem
	eventually(t, "the policy's answer recorded", func() bool {
		for _, x := range dialogItems(t, f, gwURL, true) {
			if x.Session == "s2" && x.Outcome == wire.DialogAnswered {
				it3 = x
				return true
			}
		}
		return false
	})
	if it3.By != "policy:alpha/s2/auto" {
		t.Errorf("the s2 request was answered by %q, want the rule", it3.By)
	}

	audit := runGatewayCLI(t, f, gwURL, "audit", "--limit", "1000")
	for _, want := range []string{`"action": "dialog.open"`, `"action": "dialog.answered"`, `"action": "dialog.default"`, `"action": "dialog.late"`, "by admin:admin", "by policy:alpha/s2/auto"} {
		if !strings.Contains(audit, want) {
			t.Errorf("the audit lacks %s", want)
		}
	}
	gw.kill() // its etcd flushed and closed, its log complete
	h.p.kill()
	contents := []string{prompt, prompt2, prompt3, choice}
	assertNowhere(t, contents, map[string][]byte{"audit": []byte(audit), "gateway log": logOf(gw), "probe log": logOf(h.p)},
		f.etcdData[0], h.state, filepath.Join(root, ".allox-state"))
}

// Two replicas on one etcd, and a third the Probe does not stream to: the Probe streams to both
// of its replicas, so a person on either sees the content and answers; the third lists the
// request's metadata and says where its content is, refuses the answer with 503, and the CLI
// given it first moves on to a replica that has the stream. With the first replica killed, a new
// request is answered through the second.
func TestDialogTwoReplicas(t *testing.T) {
	needBtrfs(t)
	store := btrfstest.Mount(t)
	f := newFleet(t)
	etcdDir := t.TempDir()
	e, err := gateway.StartEmbedded(etcdDir, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closeEtcd := sync.OnceFunc(e.Close)
	t.Cleanup(closeEtcd)
	url1, _, gw1 := f.gateway("r1", e.Endpoint)
	url2, _, gw2 := f.gateway("r2", e.Endpoint)
	url3, _, _ := f.gateway("r3", e.Endpoint)
	h := dialogProbe(t, f, "host-a", url1+","+url2, store)
	a := f.admin(url1, url2)
	runGatewayCLI(t, f, url2, "apply", writeSpec(t, dialogSpec))
	eventually(t, "alpha running", running(t, a, "alpha", "host-a"))
	c := sandboxRPC(t, h, "alpha")
	root := filepath.Join(store, "host-a", "alpha")

	prompt, choice := marker(t, "prompt"), marker(t, "choice")
	r := ask(t, c, root, "s1", prompt, choice, "--timeout 120")
	it := waitItem(t, f, url1, prompt)
	waitItem(t, f, url2, prompt)
	var third wire.DialogItem
	for _, x := range dialogItems(t, f, url3, false) {
		if x.RequestID == it.RequestID {
			third = x
		}
	}
	if third.RequestID == "" || third.Content != nil || !strings.Contains(third.Holder, "host host-a's Probe does not stream its dialog to this replica") {
		t.Fatalf("replica r3 lists %+v: want the metadata, no content, and where the content is", third)
	}
	if out, err := answerCLI(f, url3, "alpha", "s1", it.RequestID, choice); err == nil || !strings.Contains(out, "holds no dialog stream from host host-a") {
		t.Fatalf("an answer on r3 alone: %v %s, want 503 naming the missing stream", err, out)
	}
	if out, err := answerCLI(f, url3+","+url2, "alpha", "s1", it.RequestID, choice); err != nil || !strings.Contains(out, `"outcome": "answered"`) {
		t.Fatalf("an answer given r3 then r2: %v %s", err, out)
	}
	if got := output(t, c, r); got != "got-option\n" {
		t.Fatalf("the run got %q", got)
	}

	gw1.kill()
	prompt2 := marker(t, "prompt")
	r2 := ask(t, c, root, "s1", prompt2, choice, "--timeout 120")
	it2 := waitItem(t, f, url2, prompt2)
	if out, err := answerCLI(f, url2, "alpha", "s1", it2.RequestID, choice); err != nil {
		t.Fatalf("an answer through r2 with r1 gone: %v %s", err, out)
	}
	if got := output(t, c, r2); got != "got-option\n" {
		t.Fatalf("the second run got %q", got)
	}
	gw2.kill()
	h.p.kill()
	closeEtcd()
	assertNowhere(t, []string{prompt, prompt2, choice}, map[string][]byte{"r1 log": logOf(gw1), "r2 log": logOf(gw2), "probe log": logOf(h.p)},
		etcdDir, h.state, filepath.Join(root, ".allox-state"))
}

func logOf(p *proc) []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	return []byte(strings.Join(p.lines, "\n"))
}

// assertNowhere fails when any of contents is in one of the texts or in any file below dirs.
// Sparse files (the QEMU runtime's store disks) are read by their data extents.
func assertNowhere(t *testing.T, contents []string, texts map[string][]byte, dirs ...string) {
	t.Helper()
	check := func(where string, b []byte) {
		for _, c := range contents {
			if bytes.Contains(b, []byte(c)) {
				t.Errorf("%s holds the dialog's content %q", where, c)
			}
		}
	}
	for name, b := range texts {
		check(name, b)
	}
	files := 0
	for _, dir := range dirs {
		filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if err != nil || !d.Type().IsRegular() {
				return nil
			}
			files++
			scanFile(t, p, check)
			return nil
		})
	}
	if files == 0 {
		t.Fatalf("no files below %v: the search would find nothing anyway", dirs)
	}
}

// scanFile hands check the data of the file at p in overlapping chunks, skipping holes.
func scanFile(t *testing.T, p string, check func(string, []byte)) {
	fh, err := os.Open(p)
	if err != nil {
		return
	}
	defer fh.Close()
	fi, _ := fh.Stat()
	const chunk, overlap = 8 << 20, 4096
	buf := make([]byte, chunk+overlap)
	var off int64
	for off < fi.Size() {
		data, err := unix.Seek(int(fh.Fd()), off, unix.SEEK_DATA)
		if err != nil {
			return // no more data
		}
		hole, err := unix.Seek(int(fh.Fd()), data, unix.SEEK_HOLE)
		if err != nil {
			hole = fi.Size()
		}
		for pos := data; pos < hole; pos += chunk {
			n, err := fh.ReadAt(buf[:min(int64(chunk+overlap), hole-pos+overlap)], pos)
			if n > 0 {
				check(p, buf[:n])
			}
			if err != nil && err != io.EOF {
				return
			}
		}
		off = hole
	}
}
