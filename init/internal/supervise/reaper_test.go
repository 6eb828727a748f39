package supervise

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestCombinedOutputWhileReaping runs a tool the way the store's mkfs.btrfs runs at boot: while
// the reaper (started in TestMain) reaps every child. Each run gets its own output and exit
// status; none loses its child to the reaper (exec.Cmd.Wait would: "waitid: no child processes").
func TestCombinedOutputWhileReaping(t *testing.T) {
	for i := range 50 {
		out, err := reaper.CombinedOutput(context.Background(), exec.Command("/bin/sh", "-c", "echo out; echo err >&2; exit 3"))
		if err == nil || !strings.Contains(err.Error(), "exit status 3") {
			t.Fatalf("run %d: err %v; want exit status 3", i, err)
		}
		if got := string(out); got != "out\nerr\n" {
			t.Fatalf("run %d: output %q; want both streams", i, got)
		}
	}
	out, err := reaper.CombinedOutput(context.Background(), exec.Command("/bin/sh", "-c", "echo fine"))
	if err != nil || string(out) != "fine\n" {
		t.Errorf("a successful run: %q, %v", out, err)
	}
}

// TestCombinedOutputCancel: the context kills the tool and the error says so.
func TestCombinedOutputCancel(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	began := time.Now()
	_, err := reaper.CombinedOutput(ctx, exec.Command("/bin/sleep", "30"))
	if err == nil || !strings.Contains(err.Error(), context.DeadlineExceeded.Error()) {
		t.Fatalf("err %v; want the deadline named", err)
	}
	if time.Since(began) > 10*time.Second {
		t.Errorf("took %v: the tool was not killed", time.Since(began))
	}
}
