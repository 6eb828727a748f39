package proctree

import (
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// TestCgroupAtEventTime moves a registered process to another cgroup after
// registration: its events must carry the cgroup it is in when they happen.
func TestCgroupAtEventTime(t *testing.T) {
	c := collector(t)
	dir := filepath.Join(cgroup2Mount(t), "proctree-test-"+strconv.Itoa(os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatalf("create cgroup: %v", err)
	}
	t.Cleanup(func() { _ = os.Remove(dir) })
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil {
		t.Fatal(err)
	}

	run := newRun()
	cmd, release := startHeld(t, "read _; sh -c 'exit 12'; exit 13")
	if err := c.Register(run, cmd.Process.Pid); err != nil {
		t.Fatalf("Register: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
		t.Fatalf("move to cgroup: %v", err)
	}
	release()
	_ = cmd.Wait()
	evs, ok := sink.waitFor(run, 10*time.Second, func(evs []Event) bool { return len(exitCodes(evs)) == 2 })
	if !ok {
		t.Fatalf("timed out; events %+v", evs)
	}
	for _, ev := range evs {
		if ev.CgroupID != st.Ino {
			t.Errorf("%s of %d: cgroup id %d, want %d (%s)", ev.Kind, ev.TGID, ev.CgroupID, st.Ino, dir)
		}
	}
}
