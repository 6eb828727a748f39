package daemon_test

import (
	"bytes"
	"context"
	"strings"
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
