package daemon_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/allox-os/allox/services/kuruwa/internal/cli"
	"github.com/allox-os/allox/services/kuruwa/internal/wire"
)

// fdProbe lists the shell's own descriptors (ls writes straight to the PTY, so the shell holds no
// pipe meanwhile) and whether it can see the daemon's directory.
func fdProbe(dir string) []string {
	return []string{"sh", "-c", `ls -l /proc/$$/fd; ` +
		`if [ -e ` + dir + `/inst ]; then echo PATH-VISIBLE; else echo PATH-HIDDEN; fi; env | grep -E '^(KURUWA_[A-Z_]*FD|LISTEN_)' || true`}
}

// checkFDs fails unless the probe's output shows only the PTY, on descriptors 0-2.
func checkFDs(t *testing.T, out string) {
	t.Helper()
	n := 0
	for _, l := range strings.Split(out, "\n") {
		// ls -l: "lrwx------ 1 u g 64 Dec  2 06:53 0 -> /dev/pts/1"
		if before, target, ok := strings.Cut(strings.TrimSpace(l), " -> "); ok {
			fs := strings.Fields(before)
			l = "fd " + fs[len(fs)-1] + " " + target
		}
		if !strings.HasPrefix(l, "fd ") {
			if strings.Contains(l, "KURUWA_") || strings.Contains(l, "LISTEN_") {
				t.Errorf("terminal inherited %q", l)
			}
			continue
		}
		n++
		f := strings.Fields(l)
		if len(f) < 3 {
			continue
		}
		switch {
		case f[1] == "0" || f[1] == "1" || f[1] == "2":
			if !strings.HasPrefix(f[2], "/dev/pts/") {
				t.Errorf("descriptor %s is %s, want the PTY", f[1], f[2])
			}
		default:
			t.Errorf("terminal process holds descriptor %s -> %s", f[1], f[2])
		}
	}
	if n < 3 {
		t.Fatalf("probe listed %d descriptors; output:\n%s", n, out)
	}
}

// While an accepted connection is live (a client follows another terminal), a new terminal in a
// bubblewrap instance finds no listener, no connection, no state directory and no socket path.
func TestListenerFDInvisibleToTerminals(t *testing.T) {
	bwrap(t)
	f := newDaemon(t, boxConfig)
	f.must(f.entry("agent"), "instance", "start", "box", "--name", "b")
	f.must(f.entry("agent"), "start", "busy", "--instance", "b", "--", "sh", "-c", chatter)
	live := f.dial(f.entry("agent"))
	openStream(t, live, "tail", "busy")
	out, err := f.kw(f.entry("agent"), append([]string{"run", "probe", "--instance", "b", "--"}, fdProbe(f.dir)...)...)
	if err != nil {
		t.Fatalf("probe: %v\n%s", err, out)
	}
	t.Logf("probe:\n%s", out)
	checkFDs(t, out)
	if !strings.Contains(out, "PATH-HIDDEN") {
		t.Errorf("terminal in the bubblewrap instance sees the daemon's directory %s", f.dir)
	}
}

// The host instance does not promise to hide the path, but it leaks no descriptor either.
func TestListenerFDNotInheritedOnHost(t *testing.T) {
	f := newDaemon(t, boxConfig)
	f.must(f.mgmt(), "start", "busy", "--instance", "host", "--", "sh", "-c", chatter)
	live := f.dial(f.mgmt())
	openStream(t, live, "tail", "busy")
	out, err := f.kw(f.mgmt(), append([]string{"run", "probe", "--instance", "host", "--"}, fdProbe(f.dir)...)...)
	if err != nil {
		t.Fatalf("probe: %v\n%s", err, out)
	}
	checkFDs(t, out)
}

func instanceNames(t *testing.T, f *fixture) []string {
	t.Helper()
	var res []wire.InstanceInfo
	if err := json.Unmarshal([]byte(f.must(f.mgmt(), "instance", "ls", "--json")), &res); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, in := range res {
		names = append(names, in.Name)
	}
	return names
}

func TestInitFailureIsNeverHandedOut(t *testing.T) {
	f := newDaemon(t, boxConfig+`
definition "broken" {
  init = ["sh", "-c", "echo init refuses >&2; exit 7"]
}`)
	_, err := f.kw(f.mgmt(), "instance", "start", "broken", "--name", "br")
	if err == nil || !strings.Contains(err.Error(), "init exited") || !strings.Contains(err.Error(), "init refuses") {
		t.Fatalf("got %v, want the init's failure and its output", err)
	}
	if names := instanceNames(t, f); slices.Contains(names, "br") {
		t.Fatalf("failed instance listed: %v", names)
	}
	_, err = f.kw(f.mgmt(), "start", "x", "--instance", "br", "--", "true")
	wantCode(t, err, wire.CodeNotFound)
	if ents, _ := os.ReadDir(filepath.Join(f.dir, "inst")); len(ents) != 1 { // the host instance's
		t.Fatalf("socket directories left behind: %v", ents)
	}
}

// An init that never runs the instance daemon is killed and its instance never handed out, and
// the answer is "never became ready" every time. The main daemon's hello to it waits in the
// listen queue until the ready deadline, so the hello's timeout and the ready timer end at the
// same moment; whichever it hears of first, the answer is the same. (It once said "did not
// become ready: ... i/o timeout" when the hello's timeout won, about one start in ten under the
// race detector; hence 30 starts.)
func TestNeverReadyInstanceIsKilledAndNotHandedOut(t *testing.T) {
	f := newDaemon(t, boxConfig+`
definition "stuck" {
  init = ["sh", "-c", "echo $$ > /tmp/kw-stuck-pid-$PPID; exec sleep 60", "--"]
  ready_timeout = "300ms"
}
definition "stuck-fast" {
  init = ["sh", "-c", "exec sleep 60", "--"]
  ready_timeout = "20ms"
}`)
	_, err := f.kw(f.mgmt(), "instance", "start", "stuck", "--name", "st")
	if err == nil || !strings.Contains(err.Error(), "never became ready within 300ms") {
		t.Fatalf("got %v, want never became ready within 300ms", err)
	}
	pidFile := filepath.Join("/tmp", "kw-stuck-pid-"+itoa(os.Getpid()))
	defer os.Remove(pidFile)
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid := atoi(strings.TrimSpace(string(b)))
	if syscall.Kill(pid, 0) == nil {
		t.Fatalf("the stuck init (pid %d) still runs", pid)
	}
	for i := range 30 {
		_, err := f.kw(f.mgmt(), "instance", "start", "stuck-fast", "--name", fmt.Sprintf("sf%d", i))
		if err == nil || !strings.Contains(err.Error(), "never became ready within 20ms") {
			t.Fatalf("start %d: got %v, want never became ready within 20ms", i, err)
		}
	}
	for _, n := range instanceNames(t, f) {
		if n == "st" || strings.HasPrefix(n, "sf") {
			t.Fatalf("never-ready instance %s listed", n)
		}
	}
}

func TestInstanceDaemonExitInvalidatesForGood(t *testing.T) {
	f := newDaemon(t, boxConfig)
	f.must(f.entry("agent"), "instance", "start", "plain", "--name", "p")
	f.must(f.entry("agent"), "start", "victim", "--instance", "p", "--", "sleep", "60")
	// The terminal's parent is the instance daemon: kill it from inside.
	f.must(f.entry("agent"), "start", "killer", "--instance", "p", "--", "sh", "-c", "sleep 0.2; kill -KILL $PPID; sleep 5")
	deadline := time.Now().Add(10 * time.Second)
	for {
		var res wire.LsResult
		_ = json.Unmarshal([]byte(f.must(f.entry("agent"), "ls", "--json")), &res)
		if len(res.Instances) == 1 && !res.Instances[0].Valid {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("instance still valid after its daemon was killed: %+v", res)
		}
		time.Sleep(20 * time.Millisecond)
	}
	_, err := f.kw(f.entry("agent"), "start", "again", "--instance", "p", "--", "true")
	wantCode(t, err, wire.CodeGone)
	// The creator removes the socket it bound; nothing rebinds it.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		ents, _ := os.ReadDir(filepath.Join(f.dir, "inst"))
		if len(ents) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("socket directories after the instance daemon died: %v (want only the host's)", ents)
		}
	}
	_, err = f.kw(f.entry("agent"), "screen", "victim")
	wantCode(t, err, wire.CodeGone)
	if out := f.must(f.entry("agent"), "gc"); !strings.Contains(out, "instance p") || !strings.Contains(out, "victim") {
		t.Fatalf("gc removed %q", out)
	}
	// The name may be used again, by a new instance with a new id.
	out := f.must(f.entry("agent"), "instance", "start", "plain", "--name", "p")
	if !strings.Contains(out, "valid") {
		t.Fatalf("new instance: %s", out)
	}
}

func TestExitStatusKeptAfterExit(t *testing.T) {
	f := newDaemon(t, boxConfig)
	_, err := f.kw(f.mgmt(), "run", "e42", "--instance", "host", "--", "sh", "-c", "echo bye; exit 42")
	var exit *cli.ExitError
	if !asExit(err, &exit) || exit.Code != 42 {
		t.Fatalf("run returned %v, want exit status 42", err)
	}
	time.Sleep(50 * time.Millisecond)
	for range 2 {
		if st := f.must(f.mgmt(), "status", "e42"); !strings.Contains(st, "exited(42)") {
			t.Fatalf("status %q, want exited(42)", st)
		}
	}
	_, err = f.kw(f.mgmt(), "resume", "e42")
	if !asExit(err, &exit) || exit.Code != 42 {
		t.Fatalf("resume returned %v, want exit status 42", err)
	}
	_, err = f.kw(f.mgmt(), "send", "e42", "x")
	wantCode(t, err, wire.CodeGone)
}

func TestStaleTerminalIDIsRefusedAfterNameReuse(t *testing.T) {
	f := newDaemon(t, boxConfig)
	var first wire.TermInfo
	_ = json.Unmarshal([]byte(f.must(f.mgmt(), "start", "n", "--instance", "host", "--json", "--", "sleep", "30")), &first)
	f.must(f.mgmt(), "clean", "n", "--force")
	f.must(f.mgmt(), "start", "n", "--instance", "host", "--", "sleep", "30")
	conn := f.dial(f.mgmt())
	err := conn.Call("status", wire.TermArgs{Name: "n", ID: first.ID}, nil)
	wantCode(t, err, wire.CodeGone)
}

// A restart begins a new generation: no id of the old run names an object of the new one.
func TestRestartNeverRevivesGrantsOrIDs(t *testing.T) {
	dir, err := os.MkdirTemp("/tmp", "kw")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	var oldIDs []string
	func() {
		f := startIn(t, dir, boxConfig)
		f.must(f.mgmt(), "start", "g", "--instance", "host", "--", "sleep", "30")
		f.must(f.mgmt(), "grant", "other", "--terminal", "g")
		var res wire.LsResult
		_ = json.Unmarshal([]byte(f.must(f.mgmt(), "ls", "--json")), &res)
		for _, tr := range res.Terminals {
			oldIDs = append(oldIDs, tr.ID)
		}
		for _, in := range res.Instances {
			oldIDs = append(oldIDs, in.ID)
		}
		f.stop()
	}()
	f := startIn(t, dir, boxConfig)
	f.must(f.mgmt(), "start", "g", "--instance", "host", "--", "sleep", "30")
	_, err = f.kw(f.entry("other"), "screen", "g")
	wantCode(t, err, wire.CodeNotFound)
	var res wire.LsResult
	_ = json.Unmarshal([]byte(f.must(f.mgmt(), "ls", "--json")), &res)
	for _, tr := range res.Terminals {
		for _, old := range oldIDs {
			if tr.ID == old {
				t.Fatalf("id %s reused across a restart", old)
			}
		}
	}
	conn := f.dial(f.mgmt())
	wantCode(t, conn.Call("status", wire.TermArgs{Name: "g", ID: oldIDs[0]}, nil), wire.CodeGone)
}

// screen --scrollback prints the whole history and the viewport, every line once and in order,
// as text and as --json's history; the daemons carry it as one text (wire.ScreenResult), raw
// after the reply's line for the CLI.
func TestScrollbackPrintsEveryLineInOrder(t *testing.T) {
	f := newDaemon(t, boxConfig)
	f.must(f.mgmt(), "run", "sb", "--instance", "host", "--rows", "10", "--", "sh", "-c", "i=1; while [ $i -le 300 ]; do echo \"line $i  \"; i=$((i+1)); done")
	want := make([]string, 300)
	for i := range want {
		want[i] = fmt.Sprintf("line %d", i+1) // trailing blanks trimmed
	}
	text := strings.Split(strings.TrimSuffix(f.must(f.mgmt(), "screen", "sb", "--scrollback", "--plain"), "\n"), "\n")
	var res wire.ScreenResult
	if err := json.Unmarshal([]byte(f.must(f.mgmt(), "screen", "sb", "--scrollback", "--json")), &res); err != nil {
		t.Fatal(err)
	}
	if res.HistoryText != "" {
		t.Errorf("--json prints history_text as well as history")
	}
	for form, got := range map[string][]string{"text": text, "json": res.History} {
		var lines []string
		for _, l := range got {
			if strings.HasPrefix(l, "line ") {
				lines = append(lines, l)
			}
		}
		if !slices.Equal(lines, want) {
			t.Errorf("%s: %d lines of output, want 300 in order; first %q", form, len(lines), lines[:min(3, len(lines))])
		}
		if len(got) != 301 || got[300] != "" { // the viewport ends with the cursor's empty row
			t.Errorf("%s: %d lines, want the 300 printed and the cursor's empty row", form, len(got))
		}
	}
}

// A client that does not ask for the history as raw bytes (a client older than them) gets it in
// history_text, the same text, and nothing after the reply's line: it never receives a history it
// cannot see.
func TestScrollbackWithoutRawIsInTheResult(t *testing.T) {
	f := newDaemon(t, boxConfig)
	f.must(f.mgmt(), "run", "sb", "--instance", "host", "--", "sh", "-c", "i=1; while [ $i -le 300 ]; do echo line $i; i=$((i+1)); done")
	conn := f.dial(f.mgmt())
	var raw, plain wire.ScreenResult
	if err := conn.Call("screen", wire.ScreenArgs{Name: "sb", Scrollback: true, Raw: true}, &raw); err != nil {
		t.Fatal(err)
	}
	line, err := conn.CallRaw("screen", wire.ScreenArgs{Name: "sb", Scrollback: true})
	if err != nil {
		t.Fatal(err)
	}
	if i := bytes.IndexByte(line, '\n'); i != len(line)-1 {
		t.Fatalf("%d bytes after the reply's line for a client that did not ask for raw bytes", len(line)-1-i)
	}
	var resp wire.Response
	if err := json.Unmarshal(line, &resp); err != nil || json.Unmarshal(resp.Result, &plain) != nil {
		t.Fatalf("reply %.200q: %v", line, err)
	}
	if !strings.Contains(raw.HistoryText, "line 300") || plain.HistoryText != raw.HistoryText {
		t.Fatalf("history_text %d bytes, raw %d bytes; want the same history with line 300", len(plain.HistoryText), len(raw.HistoryText))
	}
}
