package daemon_test

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/allox-os/allox/services/kuruwa/internal/cli"
)

// A client that goes away — a run or tail whose process is killed, an attach that drops —
// never ends the terminal.
func TestClientDisconnectNeverEndsTheTerminal(t *testing.T) {
	f := newDaemon(t, boxConfig)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		var out bytes.Buffer
		c := &cli.Context{Args: []string{"--entry", f.mgmt(), "run", "long", "--instance", "host", "--", "sh", "-c", chatter},
			Stdin: strings.NewReader(""), Stdout: &out, Stderr: &out, Getenv: func(string) string { return "" }}
		done <- c.Execute(ctx)
	}()
	f.waitScreen(f.mgmt(), "long", "tick")
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return after its context ended")
	}
	time.Sleep(100 * time.Millisecond)
	if st := f.must(f.mgmt(), "status", "long"); !strings.Contains(st, "running") {
		t.Fatalf("the client's disconnect ended the terminal: %s", st)
	}
	conn := f.dial(f.mgmt())
	openStream(t, conn, "attach", "long")
	conn.Close()
	time.Sleep(100 * time.Millisecond)
	if st := f.must(f.mgmt(), "status", "long"); !strings.Contains(st, "running") {
		t.Fatalf("a dropped attach ended the terminal: %s", st)
	}
}

func TestSkillPrintsTheGuide(t *testing.T) {
	f := newDaemon(t, boxConfig)
	out, err := f.kw("/nonexistent", "skill")
	if err != nil || !strings.Contains(out, "--key Enter") || !strings.Contains(out, "--settle") {
		t.Fatalf("skill: %v\n%s", err, out)
	}
}

// The kuruwa program turns SIGINT into the end of a streaming verb's context (so attach can
// restore the terminal's mode), although one-request verbs start without a signal thread: a
// `tail -f` interrupted exits by itself, not killed by the signal, and the terminal runs on.
func TestInterruptEndsAStreamingVerbCleanly(t *testing.T) {
	f := newDaemon(t, boxConfig)
	f.must(f.mgmt(), "start", "ticker", "--instance", "host", "--", "sh", "-c", chatter)
	cmd := exec.Command(kuruwaBin, "--entry", f.mgmt(), "tail", "ticker", "-f")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	first := make(chan error, 1)
	go func() {
		_, err := bufio.NewReader(out).ReadString('\n')
		first <- err
		_, _ = io.Copy(io.Discard, out)
	}()
	select { // the stream is open, and its output is written as it comes, not buffered
	case err := <-first:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("tail -f printed nothing in 10 s")
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("tail -f did not end on SIGINT")
	}
	if ws := cmd.ProcessState.Sys().(syscall.WaitStatus); ws.Signaled() {
		t.Fatalf("tail -f was killed by %v instead of ending its stream", ws.Signal())
	}
	if st := f.must(f.mgmt(), "status", "ticker"); !strings.Contains(st, "running") {
		t.Fatalf("interrupting the client ended the terminal: %s", st)
	}
}
