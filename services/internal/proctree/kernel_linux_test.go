package proctree

import (
	"bufio"
	"fmt"
	"github.com/allox-os/allox/internal/testenv"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var (
	shared     *Collector
	sharedErr  error
	sharedOnce sync.Once
	nextRun    uint64 = 1000
	sink              = newSink()
)

// collector returns one Collector for the whole package: attaching is
// global, and tests tell their events apart by run id. Without root the
// test skips, except in CI where the kernel is ours and nothing may skip.
func collector(t *testing.T) *Collector {
	t.Helper()
	testenv.Root(t, "to load BPF programs", "./services/internal/proctree/")
	sharedOnce.Do(func() {
		shared, sharedErr = Open()
		if sharedErr == nil {
			go sink.drain(shared.Events())
		}
	})
	if sharedErr != nil {
		t.Fatalf("Open: %v", sharedErr)
	}
	return shared
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared != nil {
		if err := shared.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "close collector:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// sinkT collects every event so tests can wait for the ones of their run.
type sinkT struct {
	mu     sync.Mutex
	cond   *sync.Cond
	events []Event
}

func newSink() *sinkT {
	s := &sinkT{}
	s.cond = sync.NewCond(&s.mu)
	return s
}

func (s *sinkT) drain(ch <-chan Event) {
	for ev := range ch {
		s.mu.Lock()
		s.events = append(s.events, ev)
		s.mu.Unlock()
		s.cond.Broadcast()
	}
}

// waitFor returns the events of run once done says they are complete, or
// what it has after the timeout.
func (s *sinkT) waitFor(run uint64, timeout time.Duration, done func([]Event) bool) ([]Event, bool) {
	deadline := time.Now().Add(timeout)
	for {
		s.mu.Lock()
		var evs []Event
		for _, ev := range s.events {
			if ev.RunID == run {
				evs = append(evs, ev)
			}
		}
		s.mu.Unlock()
		if done(evs) {
			return evs, true
		}
		if time.Now().After(deadline) {
			return evs, false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (s *sinkT) all() []Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Event(nil), s.events...)
}

// startHeld starts sh -c script; the script must begin with `read _` so it
// stays held until release is called, after registration.
func startHeld(t testing.TB, script string) (*exec.Cmd, func()) {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", script)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd, func() {
		if _, err := io.WriteString(stdin, "go\n"); err != nil {
			t.Fatalf("release: %v", err)
		}
		stdin.Close()
	}
}

func newRun() uint64 {
	nextRun++
	return nextRun
}

// process groups events by process identity (tgid, start time).
type process struct {
	execs  []string
	exited bool
	status syscall.WaitStatus
	root   bool
}

func byProcess(evs []Event) map[[2]uint64]*process {
	out := map[[2]uint64]*process{}
	for _, ev := range evs {
		k := [2]uint64{uint64(ev.TGID), ev.StartTime}
		p := out[k]
		if p == nil {
			p = &process{}
			out[k] = p
		}
		switch ev.Kind {
		case Exec:
			p.execs = append(p.execs, filepath.Base(ev.Filename))
		case Exit:
			p.exited, p.status, p.root = true, ev.Status, ev.Root
		}
	}
	return out
}

// cgroupID returns the cgroup v2 id (the directory inode) of this process.
func cgroupID(t *testing.T) uint64 {
	t.Helper()
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	var rel string
	for _, line := range strings.Split(string(data), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			rel = p
		}
	}
	mount := cgroup2Mount(t)
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(mount, rel), &st); err != nil {
		t.Fatalf("stat own cgroup: %v", err)
	}
	return st.Ino
}

func cgroup2Mount(t *testing.T) string {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		for i, fld := range fields {
			if fld == "-" && i+1 < len(fields) && fields[i+1] == "cgroup2" {
				return fields[4]
			}
		}
	}
	t.Fatal("no cgroup2 mount: the collector reads cgroup v2 ids")
	return ""
}

// leaked counts the attribution entries of run left in the kernel map.
func leaked(t *testing.T, c *Collector, run uint64) int {
	t.Helper()
	var (
		k proctreeKey
		v proctreeAttr
		n int
	)
	it := c.objs.Attrs.Iterate()
	for it.Next(&k, &v) {
		if v.RunId == run {
			n++
		}
	}
	if err := it.Err(); err != nil {
		t.Fatalf("iterate attribution map: %v", err)
	}
	return n
}
