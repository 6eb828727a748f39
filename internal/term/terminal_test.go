package term

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
)

func startTerm(t *testing.T, argv ...string) (*Terminal, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "transcript")
	tf, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	term, err := Start(Spec{Argv: argv, Cols: 80, Rows: 24, RingBytes: 1 << 16, ScrollbackLines: 100, Env: []string{"TERM=xterm-256color", "PATH=" + os.Getenv("PATH")}}, tf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = term.Signal(9)
		<-term.Done()
	})
	return term, path
}

func waitDone(t *testing.T, term *Terminal) {
	t.Helper()
	select {
	case <-term.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("terminal did not exit")
	}
}

func TestExitStatusIsKept(t *testing.T) {
	term, path := startTerm(t, "sh", "-c", "printf out; exit 42")
	waitDone(t, term)
	st := term.Status()
	if st.Running || st.ExitCode != 42 {
		t.Fatalf("status %+v, want exited 42", st)
	}
	time.Sleep(10 * time.Millisecond)
	if b, _ := os.ReadFile(path); !strings.Contains(string(b), "out") {
		t.Fatalf("transcript %q", b)
	}
	if _, err := term.Write([]byte("x")); err != ErrExited {
		t.Fatalf("write after exit: %v", err)
	}
}

func TestSignalExitIsReported(t *testing.T) {
	term, _ := startTerm(t, "sleep", "30")
	if err := term.Signal(15); err != nil {
		t.Fatal(err)
	}
	waitDone(t, term)
	if st := term.Status(); st.Signal != "terminated" || st.ExitCode != 128+15 {
		t.Fatalf("status %+v", st)
	}
}

// The trap of charmbracelet/x/vt: a program's query (DSR) makes the emulator write a reply, and
// an emulator whose replies nobody reads blocks in Write, stopping the PTY reader. Here the
// program asks for the cursor position, reads the answer and prints it.
func TestTerminalQueriesAreAnsweredAndNeverBlockOutput(t *testing.T) {
	term, _ := startTerm(t, "sh", "-c", `stty raw -echo; printf '\033[6n'; r=$(dd bs=1 count=6 2>/dev/null | od -An -c | tr -d ' '); stty sane; echo "reply=$r"; `+
		`i=0; while [ $i -lt 50 ]; do printf '\033[5n\033[c'; i=$((i+1)); done; echo after-queries`)
	waitDone(t, term)
	snap := term.Screen().Snapshot()
	text := strings.Join(snap.Lines, "\n")
	if !strings.Contains(text, `reply=033[1;1R`) || !strings.Contains(text, "after-queries") {
		t.Fatalf("screen:\n%s", text)
	}
}

// Bracketed paste mode is tracked from the program's own requests.
func TestBracketedPasteModeTracked(t *testing.T) {
	term, _ := startTerm(t, "sh", "-c", `printf '\033[?2004h'; echo on; sleep 30`)
	deadline := time.Now().Add(5 * time.Second)
	for !term.Bracketed() {
		if time.Now().After(deadline) {
			t.Fatal("bracketed paste never reported on")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestKeys(t *testing.T) {
	for name, want := range map[string]string{"Enter": "\r", "C-c": "\x03", "c-a": "\x01", "Up": "\x1b[A", "F5": "\x1b[15~", "Esc": "\x1b", "^D": "\x04"} {
		got, err := Key(name)
		if err != nil || string(got) != want {
			t.Errorf("Key(%q) = %q, %v; want %q", name, got, err, want)
		}
	}
	if _, err := Key("Entr"); err == nil || !strings.Contains(err.Error(), "enter") {
		t.Errorf("unknown key error %v does not list the keys", err)
	}
}

// A program that cannot start is an error naming it, and leaves no goroutine behind (no reader,
// no waiter, no emulator's reply pump).
func TestStartFailureLeavesNothingRunning(t *testing.T) {
	before := runtime.NumGoroutine()
	for range 20 {
		_, err := Start(Spec{Argv: []string{"/nonexistent/kuruwa-test"}, Cols: 80, Rows: 24, RingBytes: 1 << 10, ScrollbackLines: 10}, nil)
		if err == nil || !strings.Contains(err.Error(), "start /nonexistent/kuruwa-test") {
			t.Fatalf("Start of a missing program: %v, want an error naming it", err)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines after 20 failed starts, %d before", runtime.NumGoroutine(), before)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Two resizes at once end with the PTY and the emulator at the same size, whichever wins: a
// program that draws for the PTY's size on an emulator of another garbles every screen read.
func TestConcurrentResizesLeaveThePTYAndTheScreenAgreeing(t *testing.T) {
	term, _ := startTerm(t, "sleep", "100")
	ptm := term.proc.(*ptyProcess).ptm
	for i := range 2000 {
		var wg sync.WaitGroup
		for _, size := range [][2]int{{100, 30}, {120, 40}} {
			wg.Go(func() {
				if err := term.Resize(size[0], size[1]); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		ws, err := pty.GetsizeFull(ptm)
		if err != nil {
			t.Fatal(err)
		}
		snap := term.Screen().Snapshot()
		if int(ws.Cols) != snap.Cols || int(ws.Rows) != snap.Rows {
			t.Fatalf("after concurrent resizes %d: the PTY is %dx%d, the emulator %dx%d", i, ws.Cols, ws.Rows, snap.Cols, snap.Rows)
		}
	}
}

// ptmxFDs is the set of this process's descriptors open on a PTY master.
func ptmxFDs(t *testing.T) map[string]bool {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	fds := map[string]bool{}
	for _, e := range ents {
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && strings.HasSuffix(l, "ptmx") {
			fds[e.Name()] = true
		}
	}
	return fds
}

// A background job that holds the PTY past the drain grace delays the closing of the PTY's
// master, but only until it lets go: then the reader ends and the master is closed, instead of
// its descriptor staying open for as long as the terminal is kept (a daemon keeps exited
// terminals until they are cleaned).
func TestPTYIsClosedWhenALingeringBackgroundJobLetsGo(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "release")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	before := ptmxFDs(t)
	// The job ignores the hangup its session leader's exit sends, and holds the PTY until the
	// test writes to the FIFO.
	term, _ := startTerm(t, "sh", "-c", `trap '' HUP; (read x <`+fifo+`) & exit 0`)
	var ours []string
	for fd := range ptmxFDs(t) {
		if !before[fd] {
			ours = append(ours, fd)
		}
	}
	if len(ours) != 1 {
		t.Fatalf("PTY master descriptors opened by Start: %v, want one", ours)
	}
	waitDone(t, term)
	if !ptmxFDs(t)[ours[0]] {
		t.Fatal("the PTY was closed while the background job still held it; the test no longer reaches the drain's timeout")
	}
	w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = w.WriteString("go\n")
	w.Close()
	for deadline := time.Now().Add(10 * time.Second); ptmxFDs(t)[ours[0]]; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("PTY master (descriptor %s) still open 10 s after the last holder of its other side exited", ours[0])
		}
	}
}
