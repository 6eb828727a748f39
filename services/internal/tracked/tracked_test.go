package tracked

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestExitCodeAndOutput(t *testing.T) {
	e := newEnv(t, nil)
	st := e.run(t, e.req("s1", "/bin/sh", "-c", "echo hi; echo oops >&2; exit 3"))
	if st.State != StateExited || st.ExitCode != 3 {
		t.Fatalf("status = %+v, want exited with code 3", st)
	}
	if got := e.output(t, st.RunID, "stdout"); got != "hi\n" {
		t.Errorf("stdout = %q, want %q", got, "hi\n")
	}
	if got := e.output(t, st.RunID, "stderr"); got != "oops\n" {
		t.Errorf("stderr = %q, want %q", got, "oops\n")
	}
	if _, err := os.Stat(st.Cgroup); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("run cgroup %s still exists after exit: %v", st.Cgroup, err)
	}
	want := filepath.Join(e.cfg.CgroupMount, e.cfg.CgroupParent, "a", "s1", st.RunID)
	if st.Cgroup != want {
		t.Errorf("cgroup = %q, want %q", st.Cgroup, want)
	}
}

func TestSandboxProperties(t *testing.T) {
	e := newEnv(t, nil)
	if err := os.WriteFile(filepath.Join(e.other.Current, "secret"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	script := `
echo "pid=$$"
grep NSpid /proc/self/status
grep CapEff /proc/self/status
echo "home=$HOME"
echo "pwd=$(pwd)"
echo "ws=$ALLOX_AGENT_WORKSPACE"
echo "shared=$ALLOX_AGENT_SHARED"
echo "daemon_env=${DAEMON_SECRET:-unset}"
for p in "$OTHER" "$OTHER/secret" "$RECORDS" "$STATE" "$ALLOX_AGENT_WORKSPACE/sessions/s2"; do
  test -e "$p" && echo "visible=$p"
done
touch "$ALLOX_AGENT_SHARED/w" 2>/dev/null && echo shared_writable
echo data > written.txt
`
	req := e.req("s1", "/bin/sh", "-c", script)
	req.Env = map[string]string{"OTHER": e.other.Current, "RECORDS": e.records, "STATE": e.state}
	t.Setenv("DAEMON_SECRET", "leak")
	st := e.run(t, req)
	out := e.output(t, st.RunID, "stdout")
	if st.State != StateExited || st.ExitCode != 0 {
		t.Fatalf("status = %+v\nstdout:\n%s\nstderr:\n%s", st, out, e.output(t, st.RunID, "stderr"))
	}
	t.Logf("sandbox output:\n%s", out)
	lines := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			lines[k] = v
		}
		if k, v, ok := strings.Cut(l, ":"); ok {
			lines[k] = strings.TrimSpace(v)
		}
	}
	if p := lines["pid"]; p != "1" && p != "2" {
		t.Errorf("$$ = %q, want 1 or 2 (a new PID namespace)", p)
	}
	// The sandbox's /proc belongs to its own PID namespace: grep, the
	// third process (bwrap's init, sh, grep), sees only its inner pid.
	if ns := lines["NSpid"]; ns != "3" {
		t.Errorf("NSpid of grep = %q, want 3 (inner namespace only)", ns)
	}
	if lines["CapEff"] != "0000000000000000" {
		t.Errorf("CapEff = %q, want 0", lines["CapEff"])
	}
	want := map[string]string{
		"home": e.ws.Current, "pwd": e.ws.Current, "ws": e.ws.AgentDir, "shared": e.ws.Shared, "daemon_env": "unset",
	}
	for k, v := range want {
		if lines[k] != v {
			t.Errorf("%s = %q, want %q", k, lines[k], v)
		}
	}
	for _, bad := range []string{"visible", "shared_writable"} {
		if strings.Contains(out, bad) {
			t.Errorf("sandbox output has %s:\n%s", bad, out)
		}
	}
	if b, err := os.ReadFile(filepath.Join(e.ws.Current, "written.txt")); err != nil || string(b) != "data\n" {
		t.Errorf("written.txt in current/ = %q, %v", b, err)
	}
}

func TestTmpSync(t *testing.T) {
	e := newEnv(t, nil)
	script := `echo t > /tmp/a.txt && mkdir /tmp/d && echo u > /tmp/d/b &&
mkfifo /tmp/fifo && ln -s /etc/passwd /tmp/out && ln -s a.txt /tmp/in`
	st := e.run(t, e.req("s1", "/bin/sh", "-c", script))
	if st.State != StateExited || st.ExitCode != 0 {
		t.Fatalf("status = %+v, stderr %q", st, e.output(t, st.RunID, "stderr"))
	}
	dir := filepath.Join(e.ws.Current, TmpSyncDir)
	for name, want := range map[string]string{"a.txt": "t\n", "d/b": "u\n"} {
		if b, err := os.ReadFile(filepath.Join(dir, name)); err != nil || string(b) != want {
			t.Errorf("%s = %q, %v; want %q", name, b, err, want)
		}
	}
	for _, name := range []string{"fifo", "out"} {
		if _, err := os.Lstat(filepath.Join(dir, name)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s was synced (err %v), want skipped", name, err)
		}
	}
	if l, err := os.Readlink(filepath.Join(dir, "in")); err != nil || l != "a.txt" {
		t.Errorf("inside symlink = %q, %v", l, err)
	}
	if st.Tmp == "" {
		t.Fatal("the record does not name the run's /tmp staging")
	}
	if _, err := os.Stat(st.Tmp); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("private tmp left behind: %v", err)
	}
}

func TestTimeout(t *testing.T) {
	e := newEnv(t, nil)
	req := e.req("s1", "sleep", "100")
	req.Timeout = 200 * time.Millisecond
	start := time.Now()
	st := e.run(t, req)
	if st.State != StateTimedOut {
		t.Fatalf("state = %q (%+v), want timed_out", st.State, st)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("timed out run took %s", d)
	}
	if _, err := os.Stat(st.Cgroup); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("cgroup left: %v", err)
	}
}

func TestKillBackground(t *testing.T) {
	e := newEnv(t, nil)
	st, err := e.m.Start(context.Background(), e.req("s1", "/bin/sh", "-c", "sleep 100 & sleep 100"))
	if err != nil {
		t.Fatal(err)
	}
	waitProcs(t, st.Cgroup, 4) // bwrap, its init, sh, two sleeps
	if n := e.m.Active("a", "s1"); n != 1 {
		t.Errorf("Active = %d, want 1", n)
	}
	if err := e.m.Kill(st.RunID); err != nil {
		t.Fatal(err)
	}
	st, err = e.m.Wait(context.Background(), st.RunID)
	if err != nil {
		t.Fatal(err)
	}
	if st.State != StateKilled {
		t.Errorf("state = %q, want killed", st.State)
	}
	if _, err := os.Stat(st.Cgroup); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("cgroup left after kill: %v", err)
	}
	if n := e.m.Active("a", "s1"); n != 0 {
		t.Errorf("Active after kill = %d, want 0", n)
	}
	if err := e.m.Kill(st.RunID); err != nil {
		t.Errorf("second Kill: %v", err)
	}
	if err := e.m.Kill("r-nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Kill(unknown) = %v, want ErrNotFound", err)
	}
}

func TestKillSession(t *testing.T) {
	e := newEnv(t, nil)
	var ids []string
	for _, s := range []string{"s1", "s1", "s2"} {
		st, err := e.m.Start(context.Background(), e.req(s, "/bin/sh", "-c", "sleep 100 & sleep 100"))
		if err != nil {
			t.Fatal(err)
		}
		waitProcs(t, st.Cgroup, 4)
		ids = append(ids, st.RunID)
	}
	if n := e.m.Active("a", "s1"); n != 2 {
		t.Fatalf("Active(s1) = %d, want 2", n)
	}
	if err := e.m.KillSession(context.Background(), "a", "s1"); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids[:2] {
		st, _ := e.m.Get(id)
		if st.State != StateKilled {
			t.Errorf("run %s state = %q, want killed", id, st.State)
		}
	}
	if n := e.m.Active("a", "s2"); n != 1 {
		t.Errorf("other session Active = %d, want 1 (untouched)", n)
	}
	if err := e.m.KillSession(context.Background(), "a", "s2"); err != nil {
		t.Fatal(err)
	}
	list, err := e.m.List("a", "")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, st := range list {
		got = append(got, st.RunID)
	}
	if diff := cmp.Diff(ids, got); diff != "" {
		t.Errorf("List order (-want +got):\n%s", diff)
	}
}

func TestFailClosed(t *testing.T) {
	e := newEnv(t, nil)
	if _, err := NewManager(Config{CgroupParent: "x", RecordsDir: e.records, Bwrap: "/nonexistent/bwrap"}); !errors.Is(err, ErrSandbox) {
		t.Errorf("NewManager(bogus bwrap) = %v, want ErrSandbox", err)
	}
	marker := filepath.Join(e.ws.Current, "ran")
	e.m.cfg.Bwrap = "/nonexistent/bwrap" // bwrap vanished after start-up
	_, err := e.m.Start(context.Background(), e.req("s1", "/bin/touch", marker))
	if !errors.Is(err, ErrSandbox) {
		t.Fatalf("Start = %v, want ErrSandbox", err)
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("marker exists: the command ran unsandboxed (%v)", err)
	}
	if n := e.m.Active("a", "s1"); n != 0 {
		t.Errorf("Active = %d, want 0", n)
	}
	ents, _ := os.ReadDir(filepath.Join(e.cfg.CgroupMount, e.cfg.CgroupParent, "a", "s1"))
	for _, d := range ents {
		if d.IsDir() {
			t.Errorf("run cgroup %s left behind", d.Name())
		}
	}
}

func TestSetupFailureInsideBwrap(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.SystemDirs = []string{"/usr", "/nonexistent-dir"} })
	marker := filepath.Join(e.ws.Current, "ran")
	st := e.run(t, e.req("s1", "/usr/bin/touch", marker))
	if st.State != StateFailed || !strings.Contains(st.Reason, "bwrap:") {
		t.Errorf("status = %+v, want failed with the bwrap reason", st)
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("marker exists: %v", err)
	}
}

func TestOutputPaging(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.MaxOutputBytes = 10000 })
	st := e.run(t, e.req("s1", "/bin/sh", "-c", "head -c 12000 /dev/zero | tr '\\0' x"))
	var got []byte
	var off int64
	for i := 0; ; i++ {
		data, next, eof, err := e.m.Output(st.RunID, "stdout", off, 4096)
		if err != nil {
			t.Fatal(err)
		}
		if next != off+int64(len(data)) {
			t.Fatalf("next = %d, want %d", next, off+int64(len(data)))
		}
		got, off = append(got, data...), next
		if eof {
			break
		}
		if i > 10 {
			t.Fatal("no eof")
		}
	}
	if want := strings.Repeat("x", 10000); string(got) != want {
		t.Errorf("paged output has %d bytes, want %d (bounded)", len(got), len(want))
	}
	data, next, eof, err := e.m.Output(st.RunID, "stdout", 20000, 10)
	if len(data) != 0 || next != 20000 || !eof || err != nil {
		t.Errorf("read past end = %q, %d, %v, %v", data, next, eof, err)
	}
	if _, _, _, err := e.m.Output(st.RunID, "stdlog", 0, 0); !errors.Is(err, ErrInvalid) {
		t.Errorf("bad stream err = %v", err)
	}
}

func TestRecordsSurviveRestart(t *testing.T) {
	e := newEnv(t, nil)
	done := e.run(t, e.req("s1", "/bin/true"))
	live, err := e.m.Start(context.Background(), e.req("s1", "sleep", "100"))
	if err != nil {
		t.Fatal(err)
	}
	waitProcs(t, live.Cgroup, 3)
	m2, err := NewManager(e.cfg) // a restarted daemon
	if err != nil {
		t.Fatal(err)
	}
	list, err := m2.List("a", "s1")
	if err != nil || len(list) != 2 {
		t.Fatalf("List after restart = %v, %v; want 2 runs", list, err)
	}
	if list[0].RunID != done.RunID || list[0].State != StateExited {
		t.Errorf("first = %+v, want the exited run", list[0])
	}
	if list[1].State != StateFailed || m2.Active("a", "s1") != 0 {
		t.Errorf("second = %+v, want failed (killed by the restarted manager)", list[1])
	}
	if _, err := e.m.Wait(context.Background(), live.RunID); err != nil {
		t.Fatal(err)
	}
}
