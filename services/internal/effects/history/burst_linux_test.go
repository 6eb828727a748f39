package history

import (
	"fmt"
	"strconv"
	"testing"
	"time"
)

// TestBurst starts 1,000 processes at once in the session cgroup, each creating a
// file, and expects every fork, exec, exit and file creation with nothing
// dropped, with the default ring buffer.
func TestBurst(t *testing.T) {
	const n = 1000
	requireRoot(t)
	cg := newCgroup(t, "burst")
	dir := t.TempDir()
	var buf syncBuffer
	r, err := Start(cg, &buf)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	start := time.Now()
	cmd := shell(t, cg, `for i in $(seq `+strconv.Itoa(n)+`); do /bin/touch "$DIR/f$i" & done; wait`, "DIR="+dir)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("burst: %v: %s", err, cmd.Stdout)
	}
	elapsed := time.Since(start)
	sum, evs := stopAndRead(t, r, buf.Bytes)
	created := map[string]int{}
	for _, ev := range evs {
		if ev.Kind == KindSyscall && ev.Syscall == "openat" && ev.Ret != nil && *ev.Ret >= 0 {
			created[string(ev.Strings["path"])]++
		}
	}
	for i := 1; i <= n; i++ {
		if p := fmt.Sprintf("%s/f%d", dir, i); created[p] != 1 {
			t.Errorf("%s created %d times in the history, want 1", p, created[p])
		}
	}
	// The shell, seq's command substitution and n touch processes; the
	// shell's own exec happened before Start returned or after, either way.
	if sum.Forks != n+2 || sum.Exits != n+2 || sum.Execs < n+1 {
		t.Errorf("forks %d, execs %d, exits %d; want %d, at least %d, %d", sum.Forks, sum.Execs, sum.Exits, n+2, n+1, n+2)
	}
	if sum.Dropped != 0 || sum.Incomplete {
		t.Errorf("dropped %d, incomplete %v; want a complete history", sum.Dropped, sum.Incomplete)
	}
	t.Logf("%d processes, %d events in %v (%.0f events/s), dropped %d, syscalls %v",
		n, sum.Events, elapsed, float64(sum.Events)/elapsed.Seconds(), sum.Dropped, sum.Syscalls)
}
