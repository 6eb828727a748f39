package tracked

import (
	"os/exec"
	"sort"
	"testing"
	"time"
)

// BenchmarkStartTrue measures Start-to-exit of /bin/true in the sandbox and,
// in the same run, a bare fork/exec of the same argv. It reports both p50s
// and the overhead (sandbox p50 - bare p50).
func BenchmarkStartTrue(b *testing.B) {
	e := newEnv(b, nil)
	bare := make([]time.Duration, 0, b.N)
	for range b.N {
		t0 := time.Now()
		if err := exec.Command("/bin/true").Run(); err != nil {
			b.Fatal(err)
		}
		bare = append(bare, time.Since(t0))
	}
	sandboxed := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		st := e.run(b, e.req("s1", "/bin/true"))
		sandboxed = append(sandboxed, time.Since(t0))
		if st.State != StateExited || st.ExitCode != 0 {
			b.Fatalf("status %+v", st)
		}
	}
	b.StopTimer()
	pb, ps := p50(bare), p50(sandboxed)
	b.ReportMetric(float64(pb.Microseconds()), "bare-p50-µs")
	b.ReportMetric(float64(ps.Microseconds()), "sandbox-p50-µs")
	b.ReportMetric(float64((ps - pb).Microseconds()), "overhead-p50-µs")
	b.ReportMetric(float64(ps)/float64(max(pb, 1)), "ratio")
}

func p50(d []time.Duration) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}
