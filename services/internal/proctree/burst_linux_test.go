package proctree

import (
	"os"
	"strconv"
	"testing"
	"time"
)

func itoa(i int) string { return strconv.Itoa(i) }

func readFile(p string) (string, error) {
	b, err := os.ReadFile(p)
	return string(b), err
}

// TestBurst runs 10,000 short processes in one run and expects every fork,
// exec and exit, with nothing dropped.
func TestBurst(t *testing.T) {
	const n = 10000
	c := collector(t)
	before, err := c.Drops()
	if err != nil {
		t.Fatalf("Drops: %v", err)
	}
	run := newRun()
	cmd, release := startHeld(t, "read _; for i in $(seq "+itoa(n)+"); do /bin/true; done")
	if err := c.Register(run, cmd.Process.Pid); err != nil {
		t.Fatalf("Register: %v", err)
	}
	start := time.Now()
	release()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("burst: %v", err)
	}
	evs, ok := sink.waitFor(run, 30*time.Second, func(evs []Event) bool {
		return len(evs) > 0 && evs[len(evs)-1].Kind == Exit && evs[len(evs)-1].Root
	})
	elapsed := time.Since(start)
	if !ok {
		t.Fatalf("timed out after %d events", len(evs))
	}

	count := map[Kind]int{}
	trues, trueExits := 0, 0
	for _, p := range byProcess(evs) {
		if len(p.execs) == 1 && p.execs[0] == "true" {
			trues++
			if p.exited && p.status.ExitStatus() == 0 {
				trueExits++
			}
		}
	}
	for _, ev := range evs {
		// The root's own exec of /bin/sh may land just after Register:
		// exec.Cmd.Start returns once the exec is committed, before the
		// tracepoint fires. It is not part of the burst.
		if ev.Kind == Exec && ev.TGID == cmd.Process.Pid {
			continue
		}
		count[ev.Kind]++
	}
	// The run forks seq's command substitution and n /bin/true; each execs
	// once and exits, and so does the root.
	want := map[Kind]int{Fork: n + 1, Exec: n + 1, Exit: n + 2}
	for k, w := range want {
		if count[k] != w {
			t.Errorf("%s events = %d, want %d", k, count[k], w)
		}
	}
	if trues != n || trueExits != n {
		t.Errorf("/bin/true: %d exec'd, %d exited 0; want %d", trues, trueExits, n)
	}
	if n := leaked(t, c, run); n != 0 {
		t.Errorf("%d attribution entries left after every process exited", n)
	}
	after, err := c.Drops()
	if err != nil {
		t.Fatalf("Drops: %v", err)
	}
	if after != before {
		t.Errorf("Drops() went from %d to %d, want no drops", before, after)
	}
	t.Logf("%d events in %v: %.0f events/s, drops %d", len(evs), elapsed, float64(len(evs))/elapsed.Seconds(), after-before)
}
