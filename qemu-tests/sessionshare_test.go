package qemutests

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/allox-os/allox/internal/rpc"
)

// sessionShareOut is the subdirectory of outDir() that `make image` builds from
// testdata/session-share.hcl: the appliance with the session-share plugin and --share-tools.
const sessionShareOut = "session-share"

// TestSessionShareInGuest boots the appliance with the session-share plugin and runs the seed's
// sequence from inside sandboxed runs, through the python shim and through allox share: agent-a's
// session-1 and agent-b's session-1 each run enable, agent-b/session-1 writes report.txt in its
// current/, and a run of agent-a/session-1 reads it with
// python3 /run/allox/share.py read agent-b/session-1 report.txt, no shared keys. A session that
// has not enabled share is refused both ways (as caller and as target), in one line naming the
// target, the path and the reason. A write needs the target's --permission write and lands in
// its scope. An agent created with "shared": "rw" has sessions that share files in its shared/.
func TestSessionShareInGuest(t *testing.T) {
	a := needApplianceIn(t, imageMode, filepath.Join(outDir(), sessionShareOut))
	ctx := testContext(t, 2*bootBudget)
	b := a.bootWith(ctx, t, imageMode, blankDisk(t), nil)
	b.waitReady(ctx, t)
	g := &attacker{t: t, ctx: ctx, b: b, agent: "agent-a", session: "session-1"}
	g.must(t, rpc.ActionAgentCreate, map[string]any{"agent_id": "agent-a"}, nil)
	g.must(t, rpc.ActionAgentCreate, map[string]any{"agent_id": "agent-b", "shared": "rw"}, nil)
	for _, s := range []struct{ agent, session string }{{"agent-a", "session-1"}, {"agent-a", "quiet"}, {"agent-b", "session-1"}, {"agent-b", "session-2"}} {
		g.must(t, rpc.ActionSessionCreate, map[string]any{"agent_id": s.agent, "session_id": s.session}, nil)
	}
	in := func(agent, session string) *attacker { c := *g; c.agent, c.session = agent, session; return &c }
	run := func(t *testing.T, g *attacker, script string, extra map[string]any) (stdout, stderr string, exit int) {
		t.Helper()
		out, r := g.sh(t, script, extra)
		stdout, stderr, _ = strings.Cut(out, "--stderr--\n")
		exit = -1
		if r.ExitCode != nil {
			exit = *r.ExitCode
		}
		t.Logf("%s/%s: %s: exit %d\n%s--stderr--\n%s", g.agent, g.session, script, exit, stdout, stderr)
		return stdout, stderr, exit
	}
	reader, writer := in("agent-a", "session-1"), in("agent-b", "session-1")
	const report = "findings of agent-b/session-1\n"

	t.Run("not enabled: refused both ways", func(t *testing.T) {
		if _, _, exit := run(t, writer, "printf '"+report+"' > report.txt", nil); exit != 0 {
			t.Fatalf("writing report.txt in agent-b/session-1's current/: exit %d", exit)
		}
		// Neither has enabled: the caller is refused.
		if stdout, stderr, exit := run(t, reader, "python3 /run/allox/share.py read agent-b/session-1 report.txt", nil); exit != 1 || stdout != "" ||
			!strings.Contains(stderr, "agent-b/session-1") || !strings.Contains(stderr, "report.txt") || strings.Count(strings.TrimSuffix(stderr, "\n"), "\n") != 0 {
			t.Errorf("read before enable: exit %d, stdout %q, stderr %q; want exit 1, one line naming the target and path", exit, stdout, stderr)
		}
	})
	t.Run("the seed's sequence: both enable, then read through the python shim", func(t *testing.T) {
		for _, g := range []*attacker{reader, writer} {
			if _, stderr, exit := run(t, g, "python3 /run/allox/share.py enable", nil); exit != 0 {
				t.Fatalf("%s/%s enable: exit %d, stderr %q", g.agent, g.session, exit, stderr)
			}
		}
		if stdout, stderr, exit := run(t, reader, "python3 /run/allox/share.py read agent-b/session-1 report.txt", nil); exit != 0 || stdout != report {
			t.Errorf("share.py read: exit %d, stdout %q, stderr %q; want %q", exit, stdout, stderr, report)
		}
		if stdout, stderr, exit := run(t, reader, "python3 /run/allox/share.py status", nil); exit != 0 || !strings.Contains(stdout, "true") {
			t.Errorf("share.py status after enable: exit %d, stdout %q, stderr %q", exit, stdout, stderr)
		}
	})
	t.Run("the same through allox share: read, -o into the caller's workspace, stat, ls", func(t *testing.T) {
		if stdout, stderr, exit := run(t, reader, "/run/allox/bin/allox share read agent-b/session-1 report.txt", nil); exit != 0 || stdout != report {
			t.Errorf("allox share read: exit %d, stdout %q, stderr %q", exit, stdout, stderr)
		}
		if stdout, stderr, exit := run(t, reader, "/run/allox/bin/allox share read agent-b/session-1 report.txt -o copy.txt && cat copy.txt", nil); exit != 0 || stdout != report {
			t.Errorf("allox share read -o: exit %d, stdout %q, stderr %q", exit, stdout, stderr)
		}
		if stdout, stderr, exit := run(t, reader, "/run/allox/bin/allox share stat agent-b/session-1 report.txt", nil); exit != 0 || !strings.Contains(stdout, "30") {
			t.Errorf("allox share stat: exit %d, stdout %q, stderr %q; want the size, 30", exit, stdout, stderr)
		}
		if stdout, stderr, exit := run(t, reader, "/run/allox/bin/allox share ls agent-b/session-1", nil); exit != 0 || !strings.Contains(stdout, "report.txt") {
			t.Errorf("allox share ls: exit %d, stdout %q, stderr %q", exit, stdout, stderr)
		}
	})
	t.Run("a session that has not enabled is refused as caller and as target", func(t *testing.T) {
		if _, stderr, exit := run(t, in("agent-a", "quiet"), "/run/allox/bin/allox share read agent-b/session-1 report.txt", nil); exit != 1 || !strings.Contains(stderr, "agent-b/session-1 report.txt") {
			t.Errorf("read by a session without share: exit %d, stderr %q", exit, stderr)
		}
		if _, _, exit := run(t, in("agent-a", "quiet"), "echo x > secret.txt", nil); exit != 0 {
			t.Fatal("writing secret.txt in agent-a/quiet")
		}
		if stdout, stderr, exit := run(t, writer, "python3 /run/allox/share.py read agent-a/quiet secret.txt", nil); exit != 1 || stdout != "" || !strings.Contains(stderr, "agent-a/quiet secret.txt") {
			t.Errorf("read of a session without share: exit %d, stdout %q, stderr %q", exit, stdout, stderr)
		}
	})
	t.Run("read-only by default; --permission write lets a write into the scope", func(t *testing.T) {
		if _, stderr, exit := run(t, writer, "echo hi | /run/allox/bin/allox share write agent-a/session-1 notes.txt", nil); exit != 1 || !strings.Contains(stderr, "agent-a/session-1 notes.txt") {
			t.Errorf("write to a read-only scope: exit %d, stderr %q", exit, stderr)
		}
		if _, stderr, exit := run(t, reader, "mkdir -p output && /run/allox/bin/allox share enable --scope output --permission write", nil); exit != 0 {
			t.Fatalf("enable --scope output --permission write: exit %d, stderr %q", exit, stderr)
		}
		if _, stderr, exit := run(t, writer, "echo hi | /run/allox/bin/allox share write agent-a/session-1 notes.txt", nil); exit != 0 {
			t.Errorf("write into agent-a/session-1's output/: exit %d, stderr %q", exit, stderr)
		}
		if stdout, _, exit := run(t, reader, "cat output/notes.txt", nil); exit != 0 || stdout != "hi\n" {
			t.Errorf("the written file in the target's output/: exit %d, stdout %q", exit, stdout)
		}
		if _, stderr, exit := run(t, writer, "/run/allox/bin/allox share read agent-a/session-1 copy.txt", nil); exit != 1 || !strings.Contains(stderr, "agent-a/session-1 copy.txt") {
			t.Errorf("--scope output still shows the rest of current/: exit %d, stderr %q", exit, stderr)
		}
	})
	t.Run("disable takes effect for the next request", func(t *testing.T) {
		if _, stderr, exit := run(t, writer, "python3 /run/allox/share.py disable", nil); exit != 0 {
			t.Fatalf("disable: exit %d, stderr %q", exit, stderr)
		}
		if stdout, stderr, exit := run(t, reader, "python3 /run/allox/share.py read agent-b/session-1 report.txt", nil); exit != 1 || stdout != "" || !strings.Contains(stderr, "agent-b/session-1 report.txt") {
			t.Errorf("read after the target's disable: exit %d, stdout %q, stderr %q", exit, stdout, stderr)
		}
	})
	t.Run("an agent with shared rw: its sessions share files in shared/", func(t *testing.T) {
		if _, stderr, exit := run(t, writer, `echo from-session-1 > "$ALLOX_AGENT_SHARED/note"`, nil); exit != 0 {
			t.Fatalf("write to agent-b's shared/: exit %d, stderr %q", exit, stderr)
		}
		if stdout, _, exit := run(t, in("agent-b", "session-2"), `cat "$ALLOX_AGENT_SHARED/note"`, nil); exit != 0 || stdout != "from-session-1\n" {
			t.Errorf("read in agent-b/session-2: exit %d, stdout %q", exit, stdout)
		}
		if _, stderr, exit := run(t, reader, `echo x > "$ALLOX_AGENT_SHARED/note"`, nil); exit == 0 || !strings.Contains(stderr, "Read-only file system") {
			t.Errorf("write to agent-a's (read-only) shared/: exit %d, stderr %q; want EROFS", exit, stderr)
		}
	})
	b.powerOff(ctx, t)
}
