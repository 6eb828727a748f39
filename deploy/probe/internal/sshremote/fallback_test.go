package sshremote

import (
	"io"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/allox-os/allox/internal/daemontest"
	"github.com/allox-os/allox/internal/testenv"
)

// fallbackShell attaches a new connection to the session's persistent terminal name.
func (f *fixture) fallbackShell(t *testing.T, name string) (*ssh.Client, *ssh.Session, io.Writer, io.Reader) {
	t.Helper()
	c := f.login(t)
	s, err := c.NewSession()
	must(t, err)
	must(t, s.RequestPty("xterm", 24, 80, ssh.TerminalModes{}))
	must(t, s.Setenv(FallbackEnv, name))
	in, err := s.StdinPipe()
	must(t, err)
	out, err := s.StdoutPipe()
	must(t, err)
	must(t, s.Shell())
	return c, s, in, out
}

func (f *fixture) liveRuns(t *testing.T) int {
	t.Helper()
	return daemontest.LiveRuns(t, f.host, "a", "s")
}

// The persistent terminal outlives the connection: the same shell, its variables and its screen
// are there when the client comes back; its exit status reaches the client attached then.
func TestFallbackTerminalSurvivesDisconnect(t *testing.T) {
	f := newFixture(t)
	c, _, in, out := f.fallbackShell(t, "main")
	io.WriteString(in, "export KEPT=yes; echo started-$$-$((6*7))\n") // the echo of the line shows no 42
	first := testenv.ReadUntil(t, out, "-42\r\n")
	pid := regexp.MustCompile(`started-(\d+)-42\r\n`).FindStringSubmatch(first)
	if pid == nil {
		t.Fatalf("no pid in %q", first)
	}
	go io.Copy(io.Discard, out)
	c.Close() // the client goes away
	time.Sleep(500 * time.Millisecond)
	if n := f.liveRuns(t); n != 1 {
		t.Fatalf("%d live runs after the disconnect, want the terminal's shell", n)
	}
	_, s, in, out := f.fallbackShell(t, "main")
	redraw := testenv.ReadUntil(t, out, "started-"+pid[1]+"-42") // the screen as it was
	if !strings.Contains(redraw, "\x1b[2J") {
		t.Errorf("the reattach did not redraw the screen: %q", redraw)
	}
	io.WriteString(in, "echo kept=$KEPT again-$$\n")
	testenv.ReadUntil(t, out, "kept=yes again-"+pid[1])
	io.WriteString(in, "exit 4\n")
	go io.Copy(io.Discard, out)
	if got := exitStatus(t, s.Wait()); got != 4 {
		t.Fatalf("exit status %d, want 4", got)
	}
	if n := f.liveRuns(t); n != 0 {
		t.Fatalf("%d live runs after the shell exited", n)
	}
	var act *Activity
	for _, a := range f.activities() {
		if a.Channel == "terminal_fallback" {
			act = &a
		}
	}
	if act == nil || act.Target != "main" || act.RunID == "" {
		t.Fatalf("no terminal_fallback activity naming the terminal and its run: %+v", f.activities())
	}
}

// A rollback with kill_processes ends the persistent terminal too: it is a run of the session.
func TestFallbackTerminalEndsWithRollback(t *testing.T) {
	f := newFixture(t)
	_, s, in, out := f.fallbackShell(t, "main")
	f.rollbackKills(t, s, in, out)
}

// Without a terminal, or with a bad name, the shell request is refused and nothing runs.
func TestFallbackTerminalRefusals(t *testing.T) {
	f := newFixture(t)
	c := f.login(t)
	for _, tc := range []struct {
		name string
		pty  bool
	}{{"main", false}, {"../etc", true}} {
		s, err := c.NewSession()
		must(t, err)
		if tc.pty {
			must(t, s.RequestPty("xterm", 24, 80, ssh.TerminalModes{}))
		}
		must(t, s.Setenv(FallbackEnv, tc.name))
		if err := s.Shell(); err == nil {
			t.Errorf("%s=%q (pty %v): the shell was accepted", FallbackEnv, tc.name, tc.pty)
		}
		s.Close()
	}
	if n := f.liveRuns(t); n != 0 {
		t.Fatalf("refused requests left %d runs", n)
	}
}
