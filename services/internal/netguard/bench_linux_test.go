package netguard

import (
	"strconv"
	"strings"
	"testing"
)

// BenchmarkConnect measures the guard's cost on the path it sits on: a
// connect(2)+close(2) to an unprotected loopback listener from a run below
// the guard, against the same from an unguarded sibling group in the same
// run. Each side is a child process running a tight loop that times itself
// (process start-up is not counted); the sides alternate in rounds so that
// drift on a busy machine falls on both. ns/op is the guarded side; the
// ratio guarded/unguarded is the figure to quote.
//
//	sudo go test -run '^$' -bench Connect -benchtime 20000x ./services/internal/netguard/
func BenchmarkConnect(b *testing.B) {
	f := newFixture(b)
	const rounds = 8
	chunk := max(b.N/rounds, 1)
	var guarded, open int64
	for range rounds {
		guarded += connectLoop(b, f.run, f.unprotected, chunk)
		open += connectLoop(b, f.open, f.unprotected, chunk)
	}
	ops := float64(chunk * rounds)
	b.ReportMetric(float64(guarded)/ops, "ns/op")
	b.ReportMetric(float64(open)/ops, "unguarded-ns/op")
	b.ReportMetric(float64(guarded)/float64(open), "guarded/unguarded")
}

// connectLoop runs n connect+close to 127.0.0.1:port from a child in dir
// and returns the nanoseconds the child measured.
func connectLoop(b *testing.B, dir, port string, n int) int64 {
	b.Helper()
	o := runProbe(b, dir, "loop", "127.0.0.1", port, strconv.Itoa(n))
	if o.code != 0 {
		b.Fatalf("connect loop in %s %s", dir, o)
	}
	ns, err := strconv.ParseInt(strings.TrimSpace(o.stdout), 10, 64)
	if err != nil {
		b.Fatalf("connect loop output %q: %v", o.stdout, err)
	}
	return ns
}
