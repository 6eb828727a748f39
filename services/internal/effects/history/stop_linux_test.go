package history

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestDropsReported fills a one-page ring buffer while the history's writer
// is blocked: the kernel counts the lost records, and the history and the
// summary say INCOMPLETE.
func TestDropsReported(t *testing.T) {
	requireRoot(t)
	cg := newCgroup(t, "drops")
	dir := t.TempDir()
	w := &gateWriter{open: make(chan struct{})}
	r, err := start(cg, w, uint32(os.Getpagesize()))
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	cmd := shell(t, cg, `for i in $(seq 200); do : > "$DIR/f$i"; done`, "DIR="+dir)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("shell: %v", err)
	}
	close(w.open)
	sum, evs := stopAndRead(t, r, w.buf.Bytes)
	end := evs[len(evs)-1]
	if sum.Dropped == 0 || !sum.Incomplete || end.Kind != KindEnd || end.Dropped != sum.Dropped || !end.Incomplete {
		t.Errorf("summary dropped %d incomplete %v, end line %+v; want drops reported in both", sum.Dropped, sum.Incomplete, end)
	}
	if got := uint64(len(evs) - 1); got+sum.Dropped < 200 {
		t.Errorf("%d events + %d dropped < 200 file creations", got, sum.Dropped)
	}
}

// gateWriter blocks every write until open is closed.
type gateWriter struct {
	open chan struct{}
	mu   sync.Mutex
	buf  bytes.Buffer
}

func (w *gateWriter) Write(p []byte) (int, error) {
	<-w.open
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

// TestStopDrains stops the recorder right after the last process exits:
// every record is in the history. A process blocked in a recorded syscall
// (an open of a FIFO for writing) is written as unfinished.
func TestStopDrains(t *testing.T) {
	requireRoot(t)
	cg := newCgroup(t, "drain")
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	var buf syncBuffer
	r, err := Start(cg, &buf)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	const n = 300
	cmd := shell(t, cg, `for i in $(seq `+strconv.Itoa(n)+`); do : > "$DIR/f$i"; done`, "DIR="+dir)
	blocked := shell(t, cg, `echo x > "$FIFO"`, "FIFO="+fifo)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("shell: %v", err)
	}
	time.Sleep(100 * time.Millisecond) // the blocked shell reaches its open
	sum, err := r.Stop()
	if err != nil {
		t.Fatalf("Stop: %v", err)
	}
	_ = blocked.Process.Kill()
	_ = blocked.Wait()
	if got := sum.Syscalls["openat"]; got != n+1 || sum.Unfinished != 1 {
		t.Errorf("openat events %d, unfinished %d; want %d and 1", got, sum.Unfinished, n+1)
	}
	evs, err := ReadAll(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatalf("decode history: %v", err)
	}
	var last Event
	for _, ev := range evs {
		if ev.Unfinished {
			last = ev
		}
	}
	if last.Syscall != "openat" || last.TGID != blocked.Process.Pid || last.Ret != nil || last.Args["flags"]&syscall.O_WRONLY == 0 {
		t.Errorf("unfinished event %+v; want the blocked open of pid %d", last, blocked.Process.Pid)
	}
}

// TestPresent starts a process in the cgroup before the recorder: it is
// the history's first line, identified (pid and start time) as its later
// events are.
func TestPresent(t *testing.T) {
	requireRoot(t)
	cg := newCgroup(t, "present")
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := shell(t, cg, `read _ < "$FIFO"; exit 3`, "FIFO="+fifo)
	time.Sleep(100 * time.Millisecond) // the shell has exec'd and waits
	var buf syncBuffer
	r, err := Start(cg, &buf)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	if err := os.WriteFile(fifo, []byte("go\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	sum, evs := stopAndRead(t, r, buf.Bytes)
	first, exit := evs[0], evs[len(evs)-2]
	pid := cmd.Process.Pid
	wd, _ := os.Getwd()
	if first.Kind != KindPresent || first.TGID != pid || first.Comm != "sh" || first.CgroupID != cgroupID(t, cg) || string(first.Strings["cwd"]) != wd {
		t.Errorf("first line %+v; want the shell %d present in %s", first, pid, wd)
	}
	if exit.Kind != KindExit || exit.TGID != pid || exit.StartTime != first.StartTime || exit.ExitStatus == nil || *exit.ExitStatus != 3 {
		t.Errorf("last event %+v; want the shell's exit 3 with start time %d", exit, first.StartTime)
	}
	if sum.Present != 1 || sum.Processes != 1 {
		t.Errorf("summary %+v; want 1 present process", sum)
	}
}

// TestWriteFailure: a history that could not be written is INCOMPLETE and
// Stop says why.
func TestWriteFailure(t *testing.T) {
	requireRoot(t)
	cg := newCgroup(t, "writefail")
	r, err := Start(cg, failWriter{})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	if err := shell(t, cg, `: > "$DIR/f"`, "DIR="+t.TempDir()).Wait(); err != nil {
		t.Fatal(err)
	}
	sum, err := r.Stop()
	if !errors.Is(err, errDiskFull) || !sum.Incomplete {
		t.Errorf("Stop = %+v, %v; want incomplete and %v", sum, err, errDiskFull)
	}
}

var errDiskFull = errors.New("disk full")

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errDiskFull }

// TestStopOnEmptyCgroupMissesNothing stops the recorder the moment the scope's cgroup is empty,
// which skips the settling wait: every open, fork and exit of a burst of short-lived processes
// is still in the history.
func TestStopOnEmptyCgroupMissesNothing(t *testing.T) {
	requireRoot(t)
	cg := newCgroup(t, "empty")
	dir := t.TempDir()
	var buf syncBuffer
	r, err := Start(cg, &buf)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	const n = 50
	cmd := shell(t, cg, `for i in $(seq `+strconv.Itoa(n)+`); do (: > "$DIR/f$i") & done; wait`, "DIR="+dir)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("shell: %v", err)
	}
	for r.populated() {
		time.Sleep(time.Millisecond)
	}
	sum, evs := stopAndRead(t, r, buf.Bytes)
	kinds := map[string]int{}
	for _, ev := range evs {
		kinds[ev.Kind]++
	}
	// Every process of the burst (the shell, $(seq) and the n subshells) was forked into the
	// cgroup and exited in it.
	if sum.Syscalls["openat"] != n || kinds[KindFork] < n+2 || kinds[KindExit] != kinds[KindFork] || sum.Dropped != 0 {
		t.Errorf("openat %d, forks %d, exits %d, dropped %d; want %d, at least %d, as many exits and 0",
			sum.Syscalls["openat"], kinds[KindFork], kinds[KindExit], sum.Dropped, n, n+2)
	}
}
