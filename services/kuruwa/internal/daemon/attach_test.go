package daemon_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/allox-os/allox/services/kuruwa/internal/wire"
	"github.com/creack/pty"
)

// ptyOutput collects what a process writes to its PTY.
type ptyOutput struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (o *ptyOutput) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.Write(p)
}

func (o *ptyOutput) waitFor(t *testing.T, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		o.mu.Lock()
		got := o.buf.String()
		o.mu.Unlock()
		if strings.Contains(got, want) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	t.Fatalf("attach output never showed %q:\n%q", want, o.buf.String())
}

// A person attaches from a real terminal: the screen is drawn, typing reaches the shell, the
// attach's size and later resizes apply, and C-\ detaches without ending the shell.
func TestAttachInputResizeDetach(t *testing.T) {
	f := newDaemon(t, boxConfig)
	f.must(f.mgmt(), "start", "sh1", "--instance", "host", "--", "sh")
	f.must(f.mgmt(), "send", "sh1", "echo before-attach", "--key", "Enter", "--settle", "0")
	f.waitScreen(f.mgmt(), "sh1", "before-attach")

	cmd := exec.Command(kuruwaBin, "--entry", f.mgmt(), "attach", "sh1")
	ptm, err := pty.StartWithSize(cmd, &pty.Winsize{Cols: 100, Rows: 30})
	if err != nil {
		t.Fatal(err)
	}
	defer ptm.Close()
	out := &ptyOutput{}
	go func() { _, _ = copyAll(out, ptm) }()
	out.waitFor(t, "before-attach") // the current screen, drawn from the emulator
	if _, err := ptm.Write([]byte("echo typed-$((20+22))\r")); err != nil {
		t.Fatal(err)
	}
	out.waitFor(t, "typed-42")
	f.waitScreen(f.mgmt(), "sh1", "typed-42")
	waitSize(t, f, "sh1", "size=100x30")
	if err := pty.Setsize(ptm, &pty.Winsize{Cols: 120, Rows: 40}); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Process.Signal(syscall.SIGWINCH)
	waitSize(t, f, "sh1", "size=120x40")
	if _, err := ptm.Write([]byte{0x1c}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("attach exited with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("attach did not detach on C-\\")
	}
	out.waitFor(t, "[detached from sh1]")
	if st := f.must(f.mgmt(), "status", "sh1"); !strings.Contains(st, "running") {
		t.Fatalf("detach ended the terminal: %s", st)
	}
}

func waitSize(t *testing.T, f *fixture, name, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if out, err := f.kw(f.mgmt(), "screen", name); err == nil && strings.Contains(out, want) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("terminal %s never reached %s", name, want)
}

func copyAll(dst *ptyOutput, src *os.File) (int64, error) {
	buf := make([]byte, 4096)
	var n int64
	for {
		k, err := src.Read(buf)
		if k > 0 {
			_, _ = dst.Write(buf[:k])
			n += int64(k)
		}
		if err != nil {
			return n, err
		}
	}
}

// A terminal that ignores SIGHUP (a program run under nohup, or one that traps it) is killed at
// shutdown after the grace, and it is gone, reaped, when the shutdown returns: not left running,
// nor a zombie for whoever inherits it. Two such terminals, so that the second is not waited for
// longer than the first.
func TestShutdownReapsTerminalsThatIgnoreHangup(t *testing.T) {
	f := newDaemon(t, "")
	var pids []int
	for _, name := range []string{"deaf1", "deaf2"} {
		f.must(f.mgmt(), "start", name, "--instance", "host", "--", "sh", "-c", "trap '' HUP; echo pid=$$; exec sleep 60")
		f.waitScreen(f.mgmt(), name, "pid=")
		pids = append(pids, f.status(name).PID)
	}
	start := time.Now()
	f.stop()
	took := time.Since(start)
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			state, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
			t.Errorf("terminal pid %d outlived the shutdown (kill 0: %v; /proc stat: %q)", pid, err, state)
		}
	}
	t.Logf("shutdown took %v", took.Round(time.Millisecond)) // logged, never asserted
}

// A normal shutdown ends what the daemon started — terminals in the host instance and in a
// bubblewrap instance, and runs the definitions' cleanup — and leaves alone a process it did
// not start.
func TestShutdownCleansOnlyWhatItStarted(t *testing.T) {
	bwrap(t)
	marker := filepath.Join(t.TempDir(), "cleanup")
	f := newDaemon(t, boxConfig+`
definition "tidy" {
  init = ["env"]
  cleanup = ["sh", "-c", "echo cleaned $KURUWA_INSTANCE_NAME >> `+marker+`"]
}`)
	outsider := exec.Command("sleep", "60")
	if err := outsider.Start(); err != nil {
		t.Fatal(err)
	}
	defer outsider.Process.Kill()
	f.must(f.mgmt(), "instance", "start", "box", "--name", "b")
	f.must(f.mgmt(), "instance", "start", "tidy", "--name", "td")
	var pids []string
	for _, in := range []string{"host", "b", "td"} {
		name := "s-" + in
		f.must(f.mgmt(), "start", name, "--instance", in, "--", "sh", "-c", "echo pid=$$; exec sleep 60")
		f.waitScreen(f.mgmt(), name, "pid=")
	}
	st := f.must(f.mgmt(), "ls")
	for _, l := range strings.Split(strings.TrimSpace(st), "\n") {
		if !strings.HasPrefix(l, "s-host\t") {
			continue // the others' pids are in their own pid namespace
		}
		for _, fld := range strings.Fields(l) {
			if v, ok := strings.CutPrefix(fld, "pid="); ok {
				pids = append(pids, v)
			}
		}
	}
	var res wire.LsResult
	if err := json.Unmarshal([]byte(f.must(f.mgmt(), "ls", "--json")), &res); err != nil {
		t.Fatal(err)
	}
	f.stop()
	for _, in := range res.Instances {
		if syscall.Kill(in.PID, 0) == nil {
			t.Errorf("instance %s (init pid %d) survived shutdown", in.Name, in.PID)
		}
	}
	if len(pids) != 1 {
		t.Fatalf("no pid for the host terminal in:\n%s", st)
	}
	for _, p := range pids {
		if syscall.Kill(atoi(p), 0) == nil {
			t.Errorf("host terminal pid %s survived shutdown", p)
		}
	}
	if syscall.Kill(outsider.Process.Pid, 0) != nil {
		t.Error("shutdown killed a process the daemon did not start")
	}
	if ents, _ := os.ReadDir(filepath.Join(f.dir, "inst")); len(ents) != 0 {
		t.Errorf("instance sockets left after shutdown: %v", ents)
	}
	if b, _ := os.ReadFile(marker); !strings.Contains(string(b), "cleaned td") {
		t.Errorf("cleanup did not run: %q", b)
	}
}
