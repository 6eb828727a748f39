package lifecycle

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/allox-os/allox/internal/rpc"
	"github.com/allox-os/allox/services/internal/store"
	"github.com/allox-os/allox/services/internal/tracked"
)

// BenchmarkObserverOverhead measures one managed execution of /bin/true with and without the
// observer (protocol 2: A + B + verify; protocol 3: plus the recovery and C), in a session with a
// small workspace and with 10,000 files. The "added-ms" metrics are the observer's latency over the
// unobserved run measured in the same benchmark; the target is at most 250 ms per pass.
// Protocol 3 also restores the workspace, so it is measured against two unobserved baselines: the
// bare run (v3-added-ms) and the same execution with its recovery, a checkpoint before the run and
// a rollback to it after (v3-added-over-recovery-ms).
func BenchmarkObserverOverhead(b *testing.B) {
	for _, files := range []int{10, 10000} {
		b.Run(fmt.Sprintf("files=%d", files), func(b *testing.B) {
			e := newEnv(b, "")
			e.session("s1")
			current, _, _, err := e.ws.SessionPaths("a", "s1")
			if err != nil {
				b.Fatal(err)
			}
			for i := range files {
				d := filepath.Join(current, fmt.Sprintf("d%03d", i/100))
				if err := os.MkdirAll(d, 0o755); err != nil {
					b.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(d, fmt.Sprintf("f%05d", i)), []byte("content\n"), 0o644); err != nil {
					b.Fatal(err)
				}
			}
			// Each series starts once Btrfs has finished deleting the subvolumes the previous
			// one's rollbacks replaced, so that it does not pay for the other's cleaning.
			base := timeRuns(b, e, nil)
			e.awaitCleaner(b)
			recovery := timeRecoveries(b, e)
			e.awaitCleaner(b)
			v2 := timeRuns(b, e, &RunParams{})
			e.awaitCleaner(b)
			v3 := timeRuns(b, e, &RunParams{Recovery: &rpc.Recovery{}})
			ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
			b.ReportMetric(ms(base), "unobserved-ms")
			b.ReportMetric(ms(recovery), "unobserved-recovery-ms")
			b.ReportMetric(ms(v2-base), "v2-added-ms")
			b.ReportMetric(ms(v3-base), "v3-added-ms")
			b.ReportMetric(ms(v3-recovery), "v3-added-over-recovery-ms")
			b.ReportMetric(float64(v2)/float64(base), "v2-ratio")
		})
	}
}

// timeRuns returns the median time of b.N runs of /bin/true: without the observer (rp == nil) or
// through the plugin with rp.
func timeRuns(b *testing.B, e *env, rp *RunParams) time.Duration {
	b.Helper()
	var times []time.Duration
	for range max(b.N, 5) {
		start := time.Now()
		var err error
		if rp == nil {
			err = e.plain("s1", "/bin/true")
		} else {
			var st *tracked.Status
			if st, err = e.start("s1", *rp, false, "/bin/true"); err == nil && e.effects(st).Fenced {
				err = fmt.Errorf("run fenced: %s", st.Effects)
			}
		}
		if err != nil {
			b.Fatal(err)
		}
		times = append(times, time.Since(start))
	}
	return median(times)
}

// timeRecoveries returns the median time of b.N unobserved executions of /bin/true with the
// recovery protocol 3 does: a pinned checkpoint, the run, a rollback to the checkpoint.
func timeRecoveries(b *testing.B, e *env) time.Duration {
	b.Helper()
	var times []time.Duration
	for i := range max(b.N, 5) {
		start := time.Now()
		id := fmt.Sprintf("bench-%d", i)
		_, err := e.ws.CreateCheckpoint("a", "s1", id, store.CheckpointOptions{Pin: true})
		if err == nil {
			err = e.plain("s1", "/bin/true")
		}
		if err == nil {
			_, err = e.ws.Rollback(context.Background(), "a", "s1", id, nil)
		}
		if err != nil {
			b.Fatal(err)
		}
		times = append(times, time.Since(start))
	}
	return median(times)
}

// awaitCleaner waits until Btrfs has removed every deleted subvolume (btrfs subvolume sync).
func (e *env) awaitCleaner(b *testing.B) {
	b.Helper()
	if out, err := exec.Command("btrfs", "subvolume", "sync", e.root).CombinedOutput(); err != nil {
		b.Fatalf("btrfs subvolume sync: %v: %s", err, out)
	}
}

// plain runs argv without the observer.
func (e *env) plain(session string, argv ...string) error {
	st, err := e.ws.StartProcess(context.Background(), tracked.StartRequest{AgentID: "a", SessionID: session, Argv: argv})
	if err != nil {
		return err
	}
	_, err = e.ws.WaitRun(context.Background(), st.RunID)
	return err
}

func median(d []time.Duration) time.Duration {
	slices.Sort(d)
	return d[len(d)/2]
}
