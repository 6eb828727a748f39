package daemon_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/allox-os/allox/internal/btrfstest"
	"github.com/allox-os/allox/internal/daemontest"
	"github.com/allox-os/allox/internal/rpc"
	"github.com/allox-os/allox/internal/testenv"
	"github.com/allox-os/allox/services/kuruwa/internal/wire"
)

var (
	builtWorkspaceDaemon = sync.OnceValues(func() (string, error) { return daemontest.Build("") })
	builtAlloxClient     = sync.OnceValues(daemontest.BuildClient)
)

// sessionFixture is Kuruwa in front of a real workspace daemon (real Btrfs store, real
// bubblewrap, real cgroups) with agents a and b, sessions a/s (with a baseline checkpoint) and
// b/s, reached on its authenticated host listener; definition "session" runs terminals in any
// session, "pinned" only in agent a's, and tenant "agent" may use "pinned".
type sessionFixture struct {
	*fixture
	host *rpc.Client
	root string
}

func newSessionFixture(t *testing.T) *sessionFixture {
	t.Helper()
	testenv.Root(t, "to start the workspace daemon", "./services/kuruwa/internal/daemon")
	bwrap(t)
	bin, err := builtWorkspaceDaemon()
	if err != nil {
		t.Fatal(err)
	}
	client, err := builtAlloxClient()
	if err != nil {
		t.Fatal(err)
	}
	root := btrfstest.Mount(t)
	tokenFile := filepath.Join(t.TempDir(), "token")
	const token = "kuruwa-session-test-token-0123456789"
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, addrs := daemontest.Start(t, bin, 2, "--root", root, "--listen", "127.0.0.1:0", "--listen-host", "127.0.0.1:0",
		"--token-file", tokenFile, "--session-sockets", daemontest.SocketsDir(t), "--client", client)
	host := rpc.NewClient("http://"+addrs["host"], token, nil)
	ctx := context.Background()
	for _, call := range []struct {
		action string
		params map[string]any
	}{
		{"agent.create", map[string]any{"agent_id": "a"}},
		{"agent.create", map[string]any{"agent_id": "b"}},
		{"session.create", map[string]any{"agent_id": "a", "session_id": "s", "turn_checkpoints": true}},
		{"session.create", map[string]any{"agent_id": "b", "session_id": "s"}},
	} {
		if err := host.Call(ctx, call.action, call.params, nil); err != nil {
			t.Fatalf("%s: %v", call.action, err)
		}
	}
	cfg := `
definition "session" {
  kind       = "allox_session"
  daemon     = "http://` + addrs["host"] + `"
  token_file = "` + tokenFile + `"
}
definition "pinned" {
  kind       = "allox_session"
  daemon     = "http://` + addrs["host"] + `"
  token_file = "` + tokenFile + `"
  agent      = "a"
}
tenant "agent" {
  definitions = ["pinned"]
}
`
	return &sessionFixture{fixture: newDaemon(t, cfg), host: host, root: root}
}

func (f *sessionFixture) current(agent string) string {
	return filepath.Join(f.root, "agents", agent, "workspace/sessions/s/current")
}

// instances lists the instances the management entry sees.
func (f *sessionFixture) instances(t *testing.T) string {
	t.Helper()
	return f.must(f.mgmt(), "instance", "ls")
}

// A shell of an allox_session instance is a run of the session: HOME is its current/, a file it
// writes is in the session's workspace, its process is in the session's cgroup and listed by
// process.list; a rollback with kill_processes ends it, its exit status is kept, and the file
// is gone with the rollback.
func TestSessionInstanceShellEndsWithRollback(t *testing.T) {
	f := newSessionFixture(t)
	out := f.must(f.mgmt(), "instance", "start", "session", "--name", "work", "--agent", "a", "--session", "s")
	if !strings.Contains(out, "session=a/s") {
		t.Fatalf("instance start: %q, want it to name session a/s", out)
	}
	f.must(f.mgmt(), "start", "sh", "--instance", "work")
	f.must(f.mgmt(), "send", "sh", `echo made > "$HOME/note.txt"; echo "home=$HOME"; echo done-$((6*7))`, "--key", "Enter")
	screen := f.waitScreen(f.mgmt(), "sh", "done-42")
	if !strings.Contains(screen, "home="+f.current("a")) {
		t.Errorf("HOME of the shell is not the session's current/ %s:\n%s", f.current("a"), screen)
	}
	if b, err := os.ReadFile(filepath.Join(f.current("a"), "note.txt")); err != nil || string(b) != "made\n" {
		t.Fatalf("the shell's file in the session's current/: %q, %v", b, err)
	}
	// The shell's pid, as the workspace daemon's pid namespace sees it, is in the session's cgroup.
	var list struct{ Runs []rpc.Run }
	if err := f.host.Call(context.Background(), "process.list", map[string]any{"agent_id": "a", "session_id": "s"}, &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Runs) != 1 || list.Runs[0].State != "running" || list.Runs[0].Attached == "" {
		t.Fatalf("process.list: %+v, want the terminal's run, running and attached", list.Runs)
	}
	cg, err := os.ReadFile(filepath.Join("/proc", itoa(list.Runs[0].Pid), "cgroup"))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`/a/s/`).Match(cg) {
		t.Fatalf("the run's process is in %q, not in session a/s's cgroup", cg)
	}
	if err := f.host.Call(context.Background(), "session.rollback", map[string]any{"agent_id": "a", "session_id": "s",
		"checkpoint_id": "baseline", "kill_processes": true}, nil); err != nil {
		t.Fatal(err)
	}
	st := f.waitExit(f.mgmt(), "sh")
	if !strings.Contains(st, "exited(137") {
		t.Errorf("status after the rollback: %q, want exited(137) (killed)", st)
	}
	if _, err := os.Stat(filepath.Join(f.current("a"), "note.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("note.txt after the rollback: %v, want it gone", err)
	}
	time.Sleep(100 * time.Millisecond)
	if again := f.must(f.mgmt(), "status", "sh"); again != st {
		t.Errorf("the exit status was not kept: %q then %q", st, again)
	}
}

// An instance of an unknown session, or without one, is refused naming the field, and nothing
// is created: no instance, no socket directory, no run.
func TestSessionInstanceRefusals(t *testing.T) {
	f := newSessionFixture(t)
	before := f.instances(t)
	for _, tc := range []struct {
		args        []string
		code, field string
	}{
		{[]string{"--agent", "a", "--session", "nope"}, wire.CodeNotFound, "session"},
		{[]string{"--agent", "nobody", "--session", "s"}, wire.CodeNotFound, "agent"},
		{[]string{"--agent", "a"}, wire.CodeBadRequest, "session"},
		{[]string{"--session", "s"}, wire.CodeBadRequest, "agent"},
		{[]string{"--agent", "a", "--session", "../s"}, wire.CodeBadRequest, "session"},
	} {
		_, err := f.kw(f.mgmt(), append([]string{"instance", "start", "session", "--name", "x"}, tc.args...)...)
		var we *wire.Error
		if !errors.As(err, &we) || we.Code != tc.code || we.Field != tc.field {
			t.Errorf("instance start session %v: %v, want %s naming field %s", tc.args, err, tc.code, tc.field)
		}
	}
	// A definition of another kind takes no session.
	_, err := f.kw(f.mgmt(), "instance", "start", "host", "--name", "y", "--agent", "a", "--session", "s")
	var we *wire.Error
	if !errors.As(err, &we) || we.Field != "agent" {
		t.Errorf("instance start host --agent: %v, want an error naming agent", err)
	}
	if after := f.instances(t); after != before {
		t.Errorf("refused requests changed the instances:\n%s\nthen\n%s", before, after)
	}
	if ents, _ := os.ReadDir(filepath.Join(f.dir, "inst")); len(ents) != 1 {
		t.Errorf("instance socket directories after the refusals: %d, want the host instance's only", len(ents))
	}
	var list struct{ Runs []rpc.Run }
	if err := f.host.Call(context.Background(), "process.list", map[string]any{"agent_id": "a", "session_id": "s"}, &list); err != nil || len(list.Runs) != 0 {
		t.Errorf("runs after the refusals: %+v, %v", list.Runs, err)
	}
}

// Attack: a tenant granted a definition pinned to agent a asks for an instance in agent b's
// session. It is refused, and nothing runs in b's session.
func TestSessionInstancePinnedAgentRefusesAnother(t *testing.T) {
	f := newSessionFixture(t)
	_, err := f.kw(f.entry("agent"), "instance", "start", "pinned", "--agent", "b", "--session", "s")
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != wire.CodeForbidden || we.Field != "agent" {
		t.Fatalf("pinned definition for agent b: %v, want forbidden naming agent", err)
	}
	// The same tenant is refused a definition it was not granted.
	if _, err := f.kw(f.entry("agent"), "instance", "start", "session", "--agent", "b", "--session", "s"); !errors.Is(err, &wire.Error{Code: wire.CodeForbidden}) && !errors.Is(err, &wire.Error{Code: wire.CodeNotFound}) {
		t.Fatalf("ungranted definition: %v, want refused", err)
	}
	// What it was granted works, in agent a's session only (the agent defaults to the pin).
	f.must(f.entry("agent"), "instance", "start", "pinned", "--name", "mine", "--session", "s")
	var list struct{ Runs []rpc.Run }
	if err := f.host.Call(context.Background(), "process.list", map[string]any{"agent_id": "b", "session_id": "s"}, &list); err != nil || len(list.Runs) != 0 {
		t.Fatalf("runs in b/s: %+v, %v", list.Runs, err)
	}
}

// Attack: the shell of a session instance tries to reach Kuruwa — the main daemon's directory
// (its management entry, the tenants' entries, the instance sockets), another session's
// workspace, and a descriptor of Kuruwa's — and finds none of them.
func TestSessionInstanceShellCannotEscape(t *testing.T) {
	f := newSessionFixture(t)
	f.must(f.mgmt(), "instance", "start", "session", "--name", "work", "--agent", "a", "--session", "s")
	f.must(f.mgmt(), "start", "sh", "--instance", "work")
	probe := `for p in ` + f.mgmt() + ` ` + f.entry("agent") + ` ` + f.dir + `/inst ` + f.current("b") + `; do ls -d "$p" >/dev/null 2>&1 && echo "SEE""N $p"; done; ` +
		`ls -l /proc/self/fd/ | grep -c socket | sed 's/^/sockets=/'; echo probed-$((6*7))`
	f.must(f.mgmt(), "send", "sh", probe, "--key", "Enter")
	screen := f.waitScreen(f.mgmt(), "sh", "probed-42")
	if strings.Contains(screen, "SEEN ") {
		t.Errorf("the session's shell sees Kuruwa's or another session's paths:\n%s", screen)
	}
	if !strings.Contains(screen, "sockets=0") {
		t.Errorf("the session's shell holds a socket descriptor:\n%s", screen)
	}
}

// Kuruwa's own lifecycle reaches the session's runs: cancel ends a shell's run (INT is the
// terminal's ^C, which the shell survives), and cleaning the instance with --force ends the runs
// of its terminals.
func TestSessionInstanceCancelAndCleanEndRuns(t *testing.T) {
	f := newSessionFixture(t)
	f.must(f.mgmt(), "instance", "start", "session", "--name", "work", "--agent", "a", "--session", "s")
	f.must(f.mgmt(), "start", "sh", "--instance", "work")
	f.must(f.mgmt(), "start", "sh2", "--instance", "work")
	f.must(f.mgmt(), "send", "sh", "echo up-$((6*7))", "--key", "Enter")
	f.waitScreen(f.mgmt(), "sh", "up-42")
	f.must(f.mgmt(), "cancel", "sh", "--signal", "INT")
	f.must(f.mgmt(), "send", "sh", "echo still-$((6*7))", "--key", "Enter")
	f.waitScreen(f.mgmt(), "sh", "still-42")
	if n := daemontest.LiveRuns(t, f.host, "a", "s"); n != 2 {
		t.Fatalf("%d running runs after INT, want both shells", n)
	}
	f.must(f.mgmt(), "cancel", "sh")
	if st := f.waitExit(f.mgmt(), "sh"); !strings.Contains(st, "exited(137") {
		t.Errorf("status after cancel: %q, want exited(137)", st)
	}
	if _, err := f.kw(f.mgmt(), "clean", "--instance", "work"); !errors.Is(err, &wire.Error{Code: wire.CodeConflict}) {
		t.Fatalf("clean of a non-empty instance without --force: %v, want conflict", err)
	}
	f.must(f.mgmt(), "clean", "--instance", "work", "--force")
	deadline := time.Now().Add(10 * time.Second)
	for daemontest.LiveRuns(t, f.host, "a", "s") != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d runs of the session outlived the instance", daemontest.LiveRuns(t, f.host, "a", "s"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}
