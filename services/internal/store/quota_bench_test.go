package store

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/allox-os/allox/internal/btrfstest"
)

// BenchmarkQuotaCost is the quota-cost figure: checkpoint and rollback with simple quotas on and
// off, in the same run, on two filesystems made alike, the samples of both interleaved; the
// ratios are on/off. STORE_BENCH_SAMPLES (default 200) samples per series, so p99 is a p99;
// STORE_BENCH_FILES sets the tree sizes. Each tree is built once and reused by every sample:
//
//	STORE_BENCH_FILES=1000,10000,100000 go test -run XXX -bench QuotaCost -benchtime 1x ./services/internal/store/
func BenchmarkQuotaCost(b *testing.B) {
	samples := 200
	if v := os.Getenv("STORE_BENCH_SAMPLES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("STORE_BENCH_SAMPLES=%q: use a positive number of samples", v)
		}
		samples = n
	}
	for _, n := range benchSizes(b) {
		b.Run(fmt.Sprintf("files=%d", n), func(b *testing.B) {
			stores := [2]*Store{quotaBenchStore(b, n, false), quotaBenchStore(b, n, true)}
			for b.Loop() {
				var cp, rb [2][]time.Duration // [off, on]
				for i := range samples {
					for k, s := range stores {
						cp[k] = append(cp[k], benchCheckpoint(b, s, "c"+strconv.Itoa(i)))
						rb[k] = append(rb[k], benchRollback(b, s, i))
					}
				}
				reportQuotaCost(b, n, "checkpoint", cp)
				reportQuotaCost(b, n, "rollback", rb)
			}
		})
	}
}

// quotaBenchStore makes a store on its own 4 GiB filesystem, with simple quotas on or off, and a
// session whose current/ holds n small files and a checkpoint "base" of them.
func quotaBenchStore(b *testing.B, n int, quota bool) *Store {
	btrfstest.Need(b)
	mnt, cleanup, err := btrfstest.NewSize("/var/tmp", "4G")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(cleanup)
	s, err := Open(mnt, filepath.Join(mnt, ".allox-state"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	if quota {
		if err := s.EnableQuota(QuotaConfig{Session: 2 << 30, Agent: 3 << 30, Reserve: 256 << 20}); err != nil {
			b.Fatal(err)
		}
	}
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
	if _, err := s.CreateCheckpoint("a", "s", "base", CheckpointOptions{}); err != nil {
		b.Fatal(err)
	}
	return s
}

// benchCheckpoint times one checkpoint.create of a session with one changed file, then deletes it
// (bounded retention).
func benchCheckpoint(b *testing.B, s *Store, id string) time.Duration {
	sess, err := s.GetSession("a", "s")
	if err != nil {
		b.Fatal(err)
	}
	write(b, filepath.Join(sess.Current, "0", "0"), id)
	t0 := time.Now()
	if _, err := s.CreateCheckpoint("a", "s", id, CheckpointOptions{}); err != nil {
		b.Fatal(err)
	}
	d := time.Since(t0)
	if err := s.DeleteCheckpoint("a", "s", id); err != nil {
		b.Fatal(err)
	}
	return d
}

// benchRollback times one session.rollback to "base" of a session with one changed file.
func benchRollback(b *testing.B, s *Store, i int) time.Duration {
	sess, err := s.GetSession("a", "s")
	if err != nil {
		b.Fatal(err)
	}
	write(b, filepath.Join(sess.Current, "dirty"), strconv.Itoa(i))
	t0 := time.Now()
	if _, err := s.Rollback(context.Background(), "a", "s", "base"); err != nil {
		b.Fatal(err)
	}
	return time.Since(t0)
}

// reportQuotaCost prints p50 and p99 (the maximum below 200 samples) with quotas off and on and
// their ratios.
func reportQuotaCost(b *testing.B, files int, op string, d [2][]time.Duration) {
	q := func(v []time.Duration, p int) time.Duration {
		v = slices.Clone(v)
		slices.Sort(v)
		if p == 99 && len(v) < 200 {
			return v[len(v)-1]
		}
		return v[len(v)*p/100]
	}
	hi := "p99"
	if len(d[0]) < 200 {
		hi = "max"
	}
	ms := func(t time.Duration) float64 { return float64(t.Microseconds()) / 1000 }
	off50, on50, off99, on99 := q(d[0], 50), q(d[1], 50), q(d[0], 99), q(d[1], 99)
	b.ReportMetric(float64(on50)/float64(off50), op+"-p50-on/off")
	b.ReportMetric(float64(on99)/float64(off99), op+"-"+hi+"-on/off")
	b.ReportMetric(ms(on50), op+"-p50-on-ms")
	b.ReportMetric(ms(off50), op+"-p50-off-ms")
	fmt.Printf("quota cost: %-10s files=%-6d n=%d per series  p50 off %.2f ms on %.2f ms (x%.3f)  %s off %.2f ms on %.2f ms (x%.3f)\n",
		op, files, len(d[0]), ms(off50), ms(on50), float64(on50)/float64(off50), hi, ms(off99), ms(on99), float64(on99)/float64(off99))
}
