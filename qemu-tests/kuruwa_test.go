package qemutests

import (
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/allox-os/allox/internal/rpc"
)

// kuruwaOut is the subdirectory of outDir() that `make image` builds from testdata/kuruwa.hcl:
// the appliance with the kuruwa service and managed execution.
const kuruwaOut = "kuruwa"

// kuruwaGuest drives the kuruwa CLI in the guest: each call is a managed run (outside every
// sandbox, as root in the guest) of an operator session, so it reaches Kuruwa's entries in
// /run/kuruwa as the host's management tools would.
type kuruwaGuest struct {
	ops *attacker
}

func shQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// kw runs /usr/bin/kuruwa --entry ENTRY ARGS and returns its stdout, stderr and exit status.
func (k kuruwaGuest) kw(t *testing.T, entry string, args ...string) (stdout, stderr string, exit int) {
	t.Helper()
	q := []string{"/usr/bin/kuruwa", "--entry", entry}
	for _, a := range args {
		q = append(q, shQuote(a))
	}
	return k.script(t, strings.Join(q, " "))
}

func (k kuruwaGuest) script(t *testing.T, script string) (stdout, stderr string, exit int) {
	t.Helper()
	out, r := k.ops.sh(t, script, map[string]any{"managed": true})
	stdout, stderr, _ = strings.Cut(out, "--stderr--\n")
	exit = -1
	if r.ExitCode != nil {
		exit = *r.ExitCode
	}
	return stdout, stderr, exit
}

func (k kuruwaGuest) must(t *testing.T, entry string, args ...string) string {
	t.Helper()
	stdout, stderr, exit := k.kw(t, entry, args...)
	if exit != 0 {
		t.Fatalf("kuruwa %v: exit %d, stderr %q", args, exit, stderr)
	}
	return stdout
}

// waitScreen polls the terminal's screen in the guest until it shows want.
func (k kuruwaGuest) waitScreen(t *testing.T, name, want string) string {
	t.Helper()
	stdout, stderr, exit := k.script(t, `i=0; while [ $i -lt 300 ]; do s=$(/usr/bin/kuruwa --entry `+kuruwaManage+` screen `+name+` --plain) && case "$s" in *`+shQuote(want)+`*) printf '%s\n' "$s"; exit 0;; esac; i=$((i+1)); sleep 0.1; done; printf '%s\n' "$s"; exit 1`)
	if exit != 0 {
		t.Fatalf("the screen of %s never showed %q: %s (stderr %q)", name, want, stdout, stderr)
	}
	return stdout
}

const (
	kuruwaManage = "/run/kuruwa/manage/sock"
	kuruwaAgent  = "/run/kuruwa/tenants/agent/sock"
)

// TestKuruwaSessionTerminalInGuest boots the appliance with the kuruwa service and, through the
// kuruwa CLI in the guest, creates an instance of the allox_session definition in agent-a's
// session s1 and a long-lived shell in it. The shell writes into HOME, which is the session's
// current/; its process is in the session's cgroup; a rollback with kill_processes ends it, its
// exit status is kept, and the file is gone. An unknown session is refused naming the field,
// with nothing created; the restricted tenant's refusals hold, and a terminal grant gives it that
// terminal's screen and input and nothing more, until a revoke; and the shell finds neither
// Kuruwa's entries nor another session's workspace, nor a way to another session through the
// loopback listener Kuruwa uses.
func TestKuruwaSessionTerminalInGuest(t *testing.T) {
	a := needApplianceIn(t, imageMode, filepath.Join(outDir(), kuruwaOut))
	ctx := testContext(t, 2*bootBudget)
	b := a.bootWith(ctx, t, imageMode, blankDisk(t), nil)
	b.waitReady(ctx, t)
	g := &attacker{t: t, ctx: ctx, b: b, agent: "ops", session: "ctl"}
	g.must(t, rpc.ActionAgentCreate, map[string]any{"agent_id": "ops"}, nil)
	g.must(t, rpc.ActionAgentCreate, map[string]any{"agent_id": "agent-a"}, nil)
	g.must(t, rpc.ActionSessionCreate, map[string]any{"agent_id": "ops", "session_id": "ctl"}, nil)
	g.must(t, rpc.ActionSessionCreate, map[string]any{"agent_id": "agent-a", "session_id": "s1", "turn_checkpoints": true}, nil)
	g.must(t, rpc.ActionSessionCreate, map[string]any{"agent_id": "agent-a", "session_id": "s2"}, nil)
	k := kuruwaGuest{ops: g}
	s1 := &attacker{t: t, ctx: ctx, b: b, agent: "agent-a", session: "s1"}
	const s2Current = "/var/lib/allox/workspaces/agents/agent-a/workspace/sessions/s2/current"

	t.Run("an unknown session is refused naming the field, nothing created", func(t *testing.T) {
		_, stderr, exit := k.kw(t, kuruwaManage, "instance", "start", "session", "--name", "bad", "--agent", "agent-a", "--session", "nope")
		if exit == 0 || !strings.Contains(stderr, "not_found (session)") || !strings.Contains(stderr, "nope") {
			t.Errorf("instance start in an unknown session: exit %d, stderr %q; want not_found naming the session field", exit, stderr)
		}
		if ls := k.must(t, kuruwaManage, "instance", "ls"); strings.Contains(ls, "bad") {
			t.Errorf("the refused instance is listed:\n%s", ls)
		}
	})

	out := k.must(t, kuruwaManage, "instance", "start", "session", "--name", "work", "--agent", "agent-a", "--session", "s1")
	if !strings.Contains(out, "session=agent-a/s1") {
		t.Fatalf("instance start: %q, want it in session agent-a/s1", out)
	}
	k.must(t, kuruwaManage, "start", "sh", "--instance", "work")
	k.must(t, kuruwaManage, "send", "sh", `echo made > "$HOME/note.txt"; echo "home=$HOME"; echo done-$((6*7))`, "--key", "Enter")
	screen := k.waitScreen(t, "sh", "done-42")
	if !strings.Contains(screen, "home=/var/lib/allox/workspaces/agents/agent-a/workspace/sessions/s1/current") {
		t.Errorf("HOME of the shell is not session s1's current/:\n%s", screen)
	}

	t.Run("the file is in the session's workspace and the shell in its cgroup", func(t *testing.T) {
		if out, _ := s1.sh(t, "cat note.txt", nil); out != "made\n--stderr--\n" {
			t.Errorf("note.txt read by a run of the session: %q", out)
		}
		var list struct{ Runs []rpc.Run }
		g.must(t, rpc.ActionProcessList, map[string]any{"agent_id": "agent-a", "session_id": "s1"}, &list)
		var shell *rpc.Run
		for i, r := range list.Runs {
			if r.State == "running" && r.Attached == "terminal" {
				shell = &list.Runs[i]
			}
		}
		if shell == nil {
			t.Fatalf("process.list of agent-a/s1 has no running terminal run: %+v", list.Runs)
		}
		cg, _, _ := k.script(t, "cat /proc/"+strconv.Itoa(shell.Pid)+"/cgroup")
		if !regexp.MustCompile(`/agent-a/s1/`).MatchString(cg) {
			t.Errorf("the shell (pid %d) is in %q, not in session agent-a/s1's cgroup", shell.Pid, cg)
		}
	})

	t.Run("attack: the shell looks for Kuruwa's entries and another session's workspace", func(t *testing.T) {
		probe := `for p in /run/kuruwa ` + kuruwaManage + ` ` + kuruwaAgent + ` ` + s2Current + `; do ls -d "$p" >/dev/null 2>&1 && echo "SEE""N $p"; done; ls -l /proc/self/fd/ | grep -c socket | sed 's/^/sockets=/'; echo probed-$((6*7))`
		k.must(t, kuruwaManage, "send", "sh", probe, "--key", "Enter")
		screen := k.waitScreen(t, "sh", "probed-42")
		for _, l := range strings.Split(screen, "\n") {
			if strings.HasPrefix(l, "SEEN ") {
				t.Errorf("the session's shell sees %s", l)
			}
		}
		if !strings.Contains(screen, "sockets=0") {
			t.Errorf("the session's shell holds a socket descriptor:\n%s", screen)
		}
	})

	t.Run("attack: the shell drives another session through the loopback listener Kuruwa uses", func(t *testing.T) {
		body := `{"action":"process.start","params":{"agent_id":"agent-a","session_id":"s2","argv":["/bin/true"]}}`
		k.must(t, kuruwaManage, "send", "sh", `wget -q -T 5 -O- --header 'Content-Type: application/json' --post-data '`+body+`' http://127.0.0.1:8092/v1/rpc && echo "REA""CHED"; echo wget-$((6*7))`, "--key", "Enter")
		screen := k.waitScreen(t, "sh", "wget-42")
		var list struct{ Runs []rpc.Run }
		g.must(t, rpc.ActionProcessList, map[string]any{"agent_id": "agent-a", "session_id": "s2"}, &list)
		if strings.Contains(screen, "REACHED") || len(list.Runs) != 0 {
			t.Errorf("the session's shell drove session s2 (runs there: %d):\n%s", len(list.Runs), screen)
		}
	})

	t.Run("attack: the restricted tenant's refusals hold in the guest", func(t *testing.T) {
		for _, tc := range []struct {
			args []string
			want string
		}{
			{[]string{"instance", "start", "session", "--agent", "agent-a", "--session", "s2"}, "forbidden"},
			{[]string{"screen", "sh"}, "not_found"},
			{[]string{"send", "sh", "echo hijack", "--key", "Enter"}, "not_found"},
			{[]string{"start", "x", "--instance", "host"}, "not_found"},
			{[]string{"tenant", "add", "sub"}, "forbidden"},
		} {
			if _, stderr, exit := k.kw(t, kuruwaAgent, tc.args...); exit == 0 || !strings.Contains(stderr, tc.want) {
				t.Errorf("tenant agent: kuruwa %v: exit %d, stderr %q; want refused (%s)", tc.args, exit, stderr, tc.want)
			}
		}
	})

	t.Run("a terminal grant gives the tenant that terminal's screen and input, nothing more", func(t *testing.T) {
		k.must(t, kuruwaManage, "grant", "agent", "--terminal", "sh")
		k.must(t, kuruwaAgent, "send", "sh", "echo granted-$((6*7))", "--key", "Enter")
		if out := k.must(t, kuruwaAgent, "screen", "sh", "--plain"); !strings.Contains(out, "granted-42") {
			t.Errorf("the tenant's screen of its granted terminal:\n%s", out)
		}
		for _, args := range [][]string{{"cancel", "sh"}, {"clean", "sh", "--force"}, {"clean", "--instance", "work", "--force"}, {"start", "y", "--instance", "work"}} {
			if _, stderr, exit := k.kw(t, kuruwaAgent, args...); exit == 0 || !strings.Contains(stderr, "forbidden") && !strings.Contains(stderr, "not_found") {
				t.Errorf("tenant agent with a terminal grant: kuruwa %v: exit %d, stderr %q; want refused", args, exit, stderr)
			}
		}
		k.must(t, kuruwaManage, "revoke", "agent", "--terminal", "sh")
		if _, stderr, exit := k.kw(t, kuruwaAgent, "screen", "sh"); exit == 0 {
			t.Errorf("screen after the revoke: exit 0, stderr %q; want refused", stderr)
		}
		if st := k.must(t, kuruwaManage, "status", "sh"); !strings.Contains(st, "running") {
			t.Errorf("the revoke or the refused requests touched the terminal: %q", st)
		}
	})

	t.Run("rollback with kill_processes ends the shell; its status is kept, the file is gone", func(t *testing.T) {
		g.must(t, rpc.ActionSessionRollback, map[string]any{"agent_id": "agent-a", "session_id": "s1", "checkpoint_id": "baseline", "kill_processes": true}, nil)
		stdout, stderr, exit := k.script(t, `i=0; while [ $i -lt 300 ]; do s=$(/usr/bin/kuruwa --entry `+kuruwaManage+` status sh) && case "$s" in *exited*) printf '%s\n' "$s"; exit 0;; esac; i=$((i+1)); sleep 0.1; done; printf '%s\n' "$s"; exit 1`)
		if exit != 0 || !strings.Contains(stdout, "exited(137") {
			t.Fatalf("status of sh after the rollback: exit %d, %q (stderr %q); want exited(137)", exit, stdout, stderr)
		}
		if again := k.must(t, kuruwaManage, "status", "sh"); again != stdout {
			t.Errorf("the exit status was not kept: %q then %q", stdout, again)
		}
		if out, _ := s1.sh(t, "test -e note.txt && echo present || echo absent", nil); !strings.HasPrefix(out, "absent\n") {
			t.Errorf("note.txt after the rollback: %q", out)
		}
	})
	b.powerOff(ctx, t)
}
