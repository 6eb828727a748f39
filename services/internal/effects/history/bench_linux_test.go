package history

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestMain runs the syscall loop of BenchmarkOverhead when the test binary
// is started as its child (HISTORY_LOOP=kind:n:dir), and the tests otherwise.
func TestMain(m *testing.M) {
	if spec := os.Getenv("HISTORY_LOOP"); spec != "" {
		os.Exit(loop(spec))
	}
	os.Exit(m.Run())
}

// loop runs n iterations of a syscall loop and prints its duration in ns:
// "null" is getppid (not recorded: the cost every task on the machine pays),
// "files" creates, closes and removes a file (two recorded syscalls).
func loop(spec string) int {
	parts := strings.SplitN(spec, ":", 3)
	n, _ := strconv.Atoi(parts[1])
	path := filepath.Join(parts[2], "f")
	start := time.Now()
	for range n {
		switch parts[0] {
		case "null":
			unix.Getppid()
		case "files":
			fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC, 0o600)
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			unix.Close(fd)
			if err := unix.Unlink(path); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
		}
	}
	fmt.Println(time.Since(start).Nanoseconds())
	return 0
}

// BenchmarkOverhead times a syscall loop in three ways in every iteration:
// with no recorder (base), with the recorder scoped to another cgroup
// (outside), and inside the recorded cgroup (inside), and reports the
// overhead against the base. Run it alone:
//
//	go test -run '^$' -bench Overhead -benchtime 5x ./services/internal/effects/history/
func BenchmarkOverhead(b *testing.B) {
	for _, c := range []struct {
		kind string
		n    int
	}{{"null", 1000000}, {"files", 20000}} {
		b.Run(c.kind, func(b *testing.B) {
			requireRoot(b)
			cg := newCgroup(b, "bench-in")
			other := newCgroup(b, "bench-out")
			// On tmpfs: the disk's latency would drown the recorder's.
			dir, err := os.MkdirTemp("/dev/shm", "history-bench-")
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { os.RemoveAll(dir) })
			var base, outside, inside time.Duration
			var events, dropped uint64
			var cpu time.Duration
			for b.Loop() {
				base += timedLoop(b, cg, c.kind, c.n, dir)
				r, err := Start(cg, io.Discard)
				if err != nil {
					b.Fatalf("Start: %v", err)
				}
				outside += timedLoop(b, other, c.kind, c.n, dir)
				// This process's CPU while the loop (a child) runs inside is
				// the recorder's user-space side: reading and encoding.
				before := selfCPU(b)
				inside += timedLoop(b, cg, c.kind, c.n, dir)
				sum, err := r.Stop()
				cpu += selfCPU(b) - before
				if err != nil {
					b.Fatalf("Stop: %v", err)
				}
				events += sum.Events
				dropped += sum.Dropped
			}
			ops := float64(b.N * c.n)
			b.ReportMetric(float64(base.Nanoseconds())/ops, "ns/syscall-base")
			b.ReportMetric(float64(outside.Nanoseconds())/ops, "ns/syscall-outside")
			b.ReportMetric(float64(inside.Nanoseconds())/ops, "ns/syscall-inside")
			b.ReportMetric(100*(outside.Seconds()/base.Seconds()-1), "overhead-outside-%")
			b.ReportMetric(100*(inside.Seconds()/base.Seconds()-1), "overhead-inside-%")
			b.ReportMetric(float64(events)/float64(b.N), "events/op")
			b.ReportMetric(float64(dropped), "dropped")
			if events > 0 {
				b.ReportMetric(float64(cpu.Nanoseconds())/float64(events), "reader-ns/event")
			}
		})
	}
}

// timedLoop runs the loop in cgroup and returns the duration it measured.
func timedLoop(b *testing.B, cgroup, kind string, n int, dir string) time.Duration {
	self, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	fd, err := syscall.Open(cgroup, syscall.O_DIRECTORY|syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer syscall.Close(fd)
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), fmt.Sprintf("HISTORY_LOOP=%s:%d:%s", kind, n, dir))
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
	out, err := cmd.Output()
	if err != nil {
		b.Fatalf("loop: %v", err)
	}
	ns, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
	if err != nil {
		b.Fatalf("loop output %q: %v", out, err)
	}
	return time.Duration(ns)
}

// selfCPU is the user plus system CPU time this process has used.
func selfCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
