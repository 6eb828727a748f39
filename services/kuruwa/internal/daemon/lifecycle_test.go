package daemon_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/allox-os/allox/services/kuruwa/internal/cli"
	"github.com/allox-os/allox/services/kuruwa/internal/wire"
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

// stoppedInstance has tenant agent stop its own instance daemon from a terminal in it (the
// terminal's parent is that daemon, once it answered the start) and waits until it is stopped,
// beside a host terminal.
func stoppedInstance(t *testing.T, f *fixture) {
	t.Helper()
	f.must(f.mgmt(), "start", "mine", "--instance", "host", "--", "sleep", "100")
	a := f.entry("agent")
	f.must(a, "instance", "start", "plain", "--name", "p")
	f.must(a, "start", "stopper", "--instance", "p", "--", "sh", "-c", "sleep 0.5; kill -STOP $PPID; sleep 100")
	var ls wire.LsResult
	if err := json.Unmarshal([]byte(f.must(f.mgmt(), "ls", "--instances", "--json")), &ls); err != nil {
		t.Fatal(err)
	}
	pid := 0
	for _, in := range ls.Instances {
		if in.Name == "p" {
			pid = in.PID
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, _ := os.ReadFile("/proc/" + itoa(pid) + "/stat")
		if _, rest, _ := strings.Cut(string(b), ") "); strings.HasPrefix(rest, "T") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("instance daemon %d never stopped: %s", pid, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// within runs the CLI on entry and fails the test unless it returns within limit.
func within(t *testing.T, f *fixture, limit time.Duration, entryPath string, args ...string) (string, error) {
	t.Helper()
	type result struct {
		out string
		err error
	}
	done := make(chan result, 1)
	go func() { out, err := f.kw(entryPath, args...); done <- result{out, err} }()
	select {
	case r := <-done:
		return r.out, r.err
	case <-time.After(limit):
		t.Fatalf("kuruwa %v did not return within %s", args, limit)
		return "", nil
	}
}

// A tenant that stops its instance daemon holds up the host's ls for the relay's deadline at
// most, which lists the host's terminals as they are and the stopped instance's as unanswered.
func TestStoppedInstanceDaemonDoesNotHangLs(t *testing.T) {
	f := newDaemon(t, boxConfig)
	stoppedInstance(t, f)
	out, err := within(t, f, 20*time.Second, f.mgmt(), "ls")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "mine\t") || !strings.Contains(out, "running") || !regexp.MustCompile(`stopper\t\S+\tp\tunanswered`).MatchString(out) {
		t.Fatalf("ls beside a stopped instance daemon:\n%s", out)
	}
}

// gc beside a stopped instance daemon returns, and forgets none of its terminals: nothing is
// known of them.
func TestStoppedInstanceDaemonDoesNotHangGC(t *testing.T) {
	f := newDaemon(t, boxConfig)
	stoppedInstance(t, f)
	if _, err := within(t, f, 20*time.Second, f.mgmt(), "gc"); err != nil {
		t.Fatal(err)
	}
	// The instance list needs no answer from an instance daemon.
	if out := f.must(f.mgmt(), "ls", "--instances"); !regexp.MustCompile(`(?m)^host\t.*terminals=1\n(.*\n)*p\t.*terminals=1$`).MatchString(out) {
		t.Fatalf("gc beside a stopped instance daemon removed terminals:\n%s", out)
	}
}
