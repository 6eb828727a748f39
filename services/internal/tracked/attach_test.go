package tracked

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"github.com/allox-os/allox/internal/testenv"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// startAttached starts an attached run of argv in session s1 and closes its streams at the end.
func (e *env) startAttached(t *testing.T, term *TermSize, argv ...string) (*Status, *Attached) {
	t.Helper()
	st, a, err := e.m.StartAttached(context.Background(), e.req("s1", argv...), term)
	if err != nil {
		t.Fatalf("StartAttached(%q): %v", argv, err)
	}
	t.Cleanup(func() { a.Close() })
	return st, a
}

func (e *env) wait(t *testing.T, runID string) *Status {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := e.m.Wait(ctx, runID)
	if err != nil {
		t.Fatalf("Wait: %v", err)
	}
	return st
}

func TestAttachedPipes(t *testing.T) {
	e := newEnv(t, nil)
	st, a := e.startAttached(t, nil, "/bin/sh", "-c", `read x; echo "got $x"; echo oops >&2; cat >/dev/null; exit 42`)
	if st.Attached != AttachedPipes {
		t.Errorf("Status.Attached = %q, want %q", st.Attached, AttachedPipes)
	}
	if _, err := io.WriteString(a.Stdin, "hello\n"); err != nil {
		t.Fatal(err)
	}
	testenv.ReadUntil(t, a.Stdout, "got hello\n")
	testenv.ReadUntil(t, a.Stderr, "oops\n")
	a.Stdin.Close() // EOF ends cat, then the shell
	end := e.wait(t, st.RunID)
	if end.State != StateExited || end.ExitCode != 42 {
		t.Fatalf("ended %s with %d (%s), want exited with 42", end.State, end.ExitCode, end.Reason)
	}
	if out := e.output(t, st.RunID, "stdout"); out != "" {
		t.Errorf("the record kept output %q of an attached run: it went to the caller", out)
	}
	if rest, err := io.ReadAll(a.Stdout); err != nil || len(rest) != 0 {
		t.Errorf("stdout after the run: %q, %v; want EOF", rest, err)
	}
}

func TestAttachedTerminal(t *testing.T) {
	e := newEnv(t, nil)
	script := `[ -t 0 ] && [ -t 1 ] && [ -t 2 ] && echo on-a-tty
: </dev/tty && echo ctty-ok
stty size
read x
stty size
exit 7`
	st, a := e.startAttached(t, &TermSize{Rows: 24, Cols: 80}, "/bin/sh", "-c", script)
	if st.Attached != AttachedTerminal || a.Stderr != nil {
		t.Fatalf("Status.Attached %q, Stderr %v: want %q and none", st.Attached, a.Stderr, AttachedTerminal)
	}
	out := testenv.ReadUntil(t, a.Stdout, "24 80")
	for _, want := range []string{"on-a-tty", "ctty-ok"} {
		if !strings.Contains(out, want) {
			t.Errorf("terminal output %q lacks %q", out, want)
		}
	}
	if err := a.Resize(TermSize{Rows: 31, Cols: 101}); err != nil {
		t.Fatal(err)
	}
	io.WriteString(a.Stdin, "\n")
	testenv.ReadUntil(t, a.Stdout, "31 101")
	end := e.wait(t, st.RunID)
	if end.State != StateExited || end.ExitCode != 7 {
		t.Fatalf("ended %s with %d (%s), want exited with 7", end.State, end.ExitCode, end.Reason)
	}
	if err := a.Resize(TermSize{}); err == nil {
		t.Error("Resize to 0×0 was accepted")
	}
}

// A run given a terminal gets a session of its own: a background child that ignores the
// terminal's hangup still dies with the run, since the run's cgroup is killed at its end.
func TestAttachedTerminalRunEndsEverything(t *testing.T) {
	e := newEnv(t, nil)
	st, a := e.startAttached(t, &TermSize{Rows: 24, Cols: 80}, "/bin/sh", "-c", `(trap '' HUP; sleep 1000) & echo started; exit 0`)
	testenv.ReadUntil(t, a.Stdout, "started")
	end := e.wait(t, st.RunID)
	if end.State != StateExited {
		t.Fatalf("ended %s (%s)", end.State, end.Reason)
	}
	if _, err := os.Stat(end.Cgroup); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the run's cgroup %s is still there after its end (%v)", end.Cgroup, err)
	}
}

func TestAttachedRefusesStdinBytes(t *testing.T) {
	e := newEnv(t, nil)
	req := e.req("s1", "/bin/true")
	req.Stdin = []byte("x")
	if _, _, err := e.m.StartAttached(context.Background(), req, nil); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "stdin") {
		t.Fatalf("StartAttached with stdin bytes: %v; want an invalid-request error naming stdin", err)
	}
	if _, _, err := e.m.StartAttached(context.Background(), e.req("s1", "/bin/true"), &TermSize{Rows: 0, Cols: 80}); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "terminal") {
		t.Fatalf("StartAttached with 0 rows: %v; want an invalid-request error naming terminal", err)
	}
	runs, err := e.m.List("a", "s1")
	if err != nil || len(runs) != 0 {
		t.Fatalf("refused requests left runs: %v %v", runs, err)
	}
}

// Attack: a terminal run writes into another run's terminal through the guest's /dev/pts path of
// that terminal. The sandbox has a devpts of its own, so the path names nothing of the guest's.
func TestAttackTerminalRunWritesIntoAnotherRunsTerminal(t *testing.T) {
	e := newEnv(t, nil)
	victim, va := e.startAttached(t, &TermSize{Rows: 24, Cols: 80}, "/bin/sh", "-c", `echo "name=$(readlink /proc/self/fd/0)="; read x; exit 0`)
	out := testenv.ReadUntil(t, va.Stdout, "=\r\n")
	name := out[strings.Index(out, "name=")+5 : strings.LastIndex(out, "=")]
	if !strings.HasPrefix(name, "/dev/pts/") {
		t.Fatalf("the victim's terminal is %q, want a /dev/pts path", name)
	}
	attacker := e.run(t, e.req("s1", "/bin/sh", "-c", `for p in `+name+` /dev/pts/*; do [ -c "$p" ] && [ "$p" != /dev/pts/ptmx ] && echo PWNED > "$p" && echo "wrote $p"; done; ls /dev/pts; exit 0`))
	if attacker.State != StateExited {
		t.Fatalf("attacker: %s %s", attacker.State, attacker.Reason)
	}
	t.Logf("attacker: %q", e.output(t, attacker.RunID, "stdout"))
	io.WriteString(va.Stdin, "\n")
	rest, _ := io.ReadAll(bufio.NewReader(va.Stdout))
	if strings.Contains(out+string(rest), "PWNED") {
		t.Fatalf("another run wrote into the victim's terminal: %q", out+string(rest))
	}
	e.wait(t, victim.RunID)
}

// Attack: a terminal run looks for the terminal's master (or any descriptor beyond its own
// streams) among its descriptors.
func TestAttackTerminalRunHoldsOnlyItsStreams(t *testing.T) {
	e := newEnv(t, nil)
	st, a := e.startAttached(t, &TermSize{Rows: 24, Cols: 80}, "/bin/sh", "-c", `ls -l /proc/self/fd/; echo done-listing`)
	out := testenv.ReadUntil(t, a.Stdout, "done-listing")
	e.wait(t, st.RunID)
	fds := 0
	for _, line := range strings.Split(out, "\n") { // ls's own: "... 0 -> /dev/pts/0"
		f := strings.Fields(line)
		if len(f) < 3 || f[len(f)-2] != "->" {
			continue
		}
		fds++
		fd, target := f[len(f)-3], strings.TrimSpace(f[len(f)-1])
		switch {
		case strings.Contains(target, "ptmx"):
			t.Errorf("the run holds the terminal's master: %s", line)
		case fd == "0" || fd == "1" || fd == "2":
			if !strings.HasPrefix(target, "/dev/pts/") {
				t.Errorf("stream %s is %q, want the terminal", fd, target)
			}
		case strings.HasPrefix(target, "/proc/"): // ls's own directory
		default:
			t.Errorf("the run holds a descriptor beyond its streams: %s", line)
		}
	}
	if fds < 3 {
		t.Fatalf("ls listed %d descriptors: %q", fds, out)
	}
}

// Attack: a run reads a descriptor the daemon inherited from its parent (one opened without
// close-on-exec before the manager existed, as a supervisor's or a harness's would be).
func TestAttackRunReadsDescriptorTheDaemonInherited(t *testing.T) {
	secret := t.TempDir() + "/secret"
	if err := os.WriteFile(secret, []byte("the parent's secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	low, err := unix.Open(secret, unix.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(low)
	// no O_CLOEXEC, as if inherited, and above the descriptors the launcher is given (3 on)
	const fd = 100
	if err := unix.Dup3(low, fd, 0); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	e := newEnv(t, nil)
	st := e.run(t, e.req("s1", "/bin/sh", "-c", fmt.Sprintf(`ls -l /proc/self/fd/; cat <&%d; exit 0`, fd)))
	out := e.output(t, st.RunID, "stdout")
	if strings.Contains(out, "the parent's secret") || strings.Contains(out, secret) {
		t.Fatalf("the run reached a descriptor the daemon inherited (fd %d): %q", fd, out)
	}
	if !strings.Contains(out, "0 -> ") {
		t.Fatalf("the run listed no descriptors: %q", out)
	}
}

// A managed run on a terminal: its launcher leads the session the terminal controls.
func TestAttachedTerminalManaged(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.AllowManaged = true })
	req := e.req("s1", "/bin/sh", "-i")
	req.Managed = true
	st, a, err := e.m.StartAttached(context.Background(), req, &TermSize{Rows: 10, Cols: 20})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	io.WriteString(a.Stdin, ": </dev/tty && echo ctty-ok; stty size; exit 3\n")
	testenv.ReadUntil(t, a.Stdout, "10 20")
	end := e.wait(t, st.RunID)
	if end.State != StateExited || end.ExitCode != 3 {
		t.Fatalf("ended %s with %d (%s), want exited with 3", end.State, end.ExitCode, end.Reason)
	}
}
