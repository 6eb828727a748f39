package proctree

import (
	"runtime"
	"syscall"
	"testing"
	"time"
)

// BenchmarkSpawnStorm runs the same spawn storm without the collector and
// with it loaded and the storm registered, side by side in every iteration,
// and reports the overhead as a ratio of the two. Run it alone:
//
//	go test -run '^$' -bench SpawnStorm -benchtime 5x ./services/internal/proctree/
func BenchmarkSpawnStorm(b *testing.B) {
	const n = 2000
	if shared != nil {
		b.Skip("the tests' collector is attached, the baseline would include it: run with -run '^$'")
	}
	script := "read _; for i in $(seq " + itoa(n) + "); do /bin/true; done"
	var base, with, cpu time.Duration
	var events int
	var heap uint64
	for b.Loop() {
		base += storm(b, script, nil)
		c, err := Open()
		if err != nil {
			b.Fatalf("Open: %v", err)
		}
		// This process's CPU while the storm (a child) runs is the collector's user-space side:
		// the ring-buffer reader and event decoding. The BPF programs' cost lands on the storm.
		before := selfCPU(b)
		d, evs := stormWith(b, c, script)
		cpu += selfCPU(b) - before
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		heap = max(heap, ms.HeapInuse)
		with += d
		events += evs
		drops, err := c.Drops()
		if err != nil || drops != 0 {
			b.Fatalf("Drops = %d, %v; want 0", drops, err)
		}
		if err := c.Close(); err != nil {
			b.Fatalf("Close: %v", err)
		}
	}
	b.ReportMetric(float64(b.N*n)/base.Seconds(), "spawns/s-base")
	b.ReportMetric(float64(b.N*n)/with.Seconds(), "spawns/s-collector")
	b.ReportMetric(100*(with.Seconds()/base.Seconds()-1), "overhead-%")
	b.ReportMetric(float64(events)/with.Seconds(), "events/s")
	b.ReportMetric(100*cpu.Seconds()/with.Seconds(), "collector-cpu-%")
	b.ReportMetric(float64(heap)/(1<<20), "heap-MiB")
}

// selfCPU is the user plus system CPU time this process has used.
func selfCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// storm runs script to completion and returns its duration from release.
func storm(b *testing.B, script string, register func(pid int)) time.Duration {
	cmd, release := startHeld(b, script)
	if register != nil {
		register(cmd.Process.Pid)
	}
	start := time.Now()
	release()
	if err := cmd.Wait(); err != nil {
		b.Fatalf("storm: %v", err)
	}
	return time.Since(start)
}

// stormWith runs script registered with c and counts its events, waiting
// for the root's exit, which is the last one.
func stormWith(b *testing.B, c *Collector, script string) (time.Duration, int) {
	counted := make(chan int)
	go func() {
		n := 0
		for ev := range c.Events() {
			n++
			if ev.Kind == Exit && ev.Root {
				break
			}
		}
		counted <- n
		for range c.Events() {
		}
	}()
	d := storm(b, script, func(pid int) {
		if err := c.Register(1, pid); err != nil {
			b.Fatalf("Register: %v", err)
		}
	})
	return d, <-counted
}
