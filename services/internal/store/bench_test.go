package store

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// benchSizes are the file counts of the benchmarks; STORE_BENCH_FILES overrides them, e.g.
// STORE_BENCH_FILES=1000,10000,100000 go test -run XXX -bench . ./services/internal/store/
func benchSizes(b *testing.B) []int {
	env := os.Getenv("STORE_BENCH_FILES")
	if env == "" {
		return []int{1000, 10000}
	}
	var out []int
	for _, f := range strings.Split(env, ",") {
		n, err := strconv.Atoi(f)
		if err != nil {
			b.Fatalf("STORE_BENCH_FILES=%q: %v; use comma-separated file counts", env, err)
		}
		out = append(out, n)
	}
	return out
}

// benchSession makes a session whose current/ holds n small files in 100-file directories.
func benchSession(b *testing.B, n int) (*Store, *Session) {
	s, _, _ := newStore(b)
	if _, err := s.CreateAgent("a"); err != nil {
		b.Fatal(err)
	}
	sess, err := s.CreateSession("a", "s")
	if err != nil {
		b.Fatal(err)
	}
	for i := range n {
		write(b, filepath.Join(sess.Current, strconv.Itoa(i/100), strconv.Itoa(i)), "content "+strconv.Itoa(i))
	}
	return s, sess
}

// reflinkBaseline is the p50 of `cp -a --reflink=always` of the same tree, measured in the run.
func reflinkBaseline(b *testing.B, src string) time.Duration {
	var d []time.Duration
	for i := range 3 {
		dst := filepath.Join(filepath.Dir(filepath.Dir(src)), fmt.Sprintf("copy-%d", i))
		t0 := time.Now()
		if out, err := exec.Command("cp", "-a", "--reflink=always", src, dst).CombinedOutput(); err != nil {
			b.Fatalf("cp: %v: %s", err, out)
		}
		d = append(d, time.Since(t0))
	}
	return p50(d)
}

func p50(d []time.Duration) time.Duration {
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return d[len(d)/2]
}

// report prints the p50, the p99 when there are at least 200 samples (else the maximum, named
// so), the sample count and the ratio to the reflink copy measured in the same run.
func report(b *testing.B, d []time.Duration, base time.Duration) {
	b.ReportMetric(float64(p50(d).Microseconds())/1000, "p50-ms")
	if len(d) >= 200 {
		b.ReportMetric(float64(d[len(d)*99/100].Microseconds())/1000, "p99-ms")
	} else {
		b.ReportMetric(float64(d[len(d)-1].Microseconds())/1000, "max-ms")
	}
	b.ReportMetric(float64(len(d)), "samples")
	b.ReportMetric(float64(p50(d))/float64(base), "x-reflink-copy")
}

func BenchmarkCheckpoint(b *testing.B) {
	for _, n := range benchSizes(b) {
		b.Run(fmt.Sprintf("files=%d", n), func(b *testing.B) {
			s, sess := benchSession(b, n)
			base := reflinkBaseline(b, sess.Current)
			var d []time.Duration
			for i := 0; b.Loop(); i++ {
				id := "c" + strconv.Itoa(i)
				t0 := time.Now()
				if _, err := s.CreateCheckpoint("a", "s", id, CheckpointOptions{}); err != nil {
					b.Fatal(err)
				}
				d = append(d, time.Since(t0))
				if err := s.DeleteCheckpoint("a", "s", id); err != nil { // bounded retention
					b.Fatal(err)
				}
			}
			report(b, d, base)
		})
	}
}

func BenchmarkRollback(b *testing.B) {
	for _, n := range benchSizes(b) {
		b.Run(fmt.Sprintf("files=%d", n), func(b *testing.B) {
			s, sess := benchSession(b, n)
			base := reflinkBaseline(b, sess.Current)
			if _, err := s.CreateCheckpoint("a", "s", "c", CheckpointOptions{}); err != nil {
				b.Fatal(err)
			}
			var d []time.Duration
			for i := 0; b.Loop(); i++ {
				write(b, filepath.Join(sess.Current, "dirty"), strconv.Itoa(i))
				t0 := time.Now()
				if _, err := s.Rollback(context.Background(), "a", "s", "c"); err != nil {
					b.Fatal(err)
				}
				d = append(d, time.Since(t0))
			}
			report(b, d, base)
		})
	}
}
