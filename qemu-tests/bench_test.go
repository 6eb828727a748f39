package qemutests

import (
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/allox-os/allox/internal/baseline"
	"github.com/allox-os/allox/internal/vm"
)

// BenchmarkBootToReady measures, per iteration, QEMU start → ready for the appliance (image mode,
// fresh workspace disk, to BootDone and every ready service) and for the baseline (Debian's stock
// kernel + busybox init, to its ready marker), on the same QEMU, accelerator and memory, and
// reports the median of each, their range and the ratio of the medians, with the sample count
// (make bench runs 5: an iteration is two boots). The sub-benchmark is named after the
// accelerator (kvm or tcg): ratios are comparable only within one.
func BenchmarkBootToReady(b *testing.B) {
	a := needAppliance(b, imageMode)
	bl := needBaseline(b)
	var baseCmdline []string // the same console verbosity for both
	if slices.Contains(a.info.Cmdline, "quiet") {
		baseCmdline = append(baseCmdline, "quiet")
	}
	b.Run(vm.Accel(), func(b *testing.B) {
		var ours, theirs []time.Duration
		for range b.N { // alternate, so that load on the machine hits both alike
			ours = append(ours, oursToReady(b, a))
			theirs = append(theirs, baselineToReady(b, bl, a.info.MemoryMiB, baseCmdline))
		}
		reportRatio(b, ours, theirs, "baseline")
	})
}

func oursToReady(b *testing.B, a *built) time.Duration {
	ctx := testContext(b, bootBudget)
	v := a.boot(ctx, b, imageMode, blankDisk(b))
	ready := v.waitReady(ctx, b)
	v.Kill() // only the boot is measured
	return ready.At
}

func baselineToReady(b *testing.B, bl baselineBoot, memMiB int, cmdline []string) time.Duration {
	ctx := testContext(b, bootBudget)
	v := bl.boot(ctx, b, memMiB, cmdline...)
	l, err := v.WaitForLine(ctx, baseline.ReadyMarker)
	if err != nil {
		b.Fatal(err)
	}
	if err := v.Wait(); err != nil {
		b.Fatal(err)
	}
	return l.At
}

// BenchmarkParityBootToReady measures what Kata kernel parity costs at boot: QEMU start → ready for
// the appliance and for the same appliance built without the parity fragments (ALLOX_OUT's
// no-kata-parity/, which make bench builds), alternating, with the median of each, their range and
// the ratio of the medians.
func BenchmarkParityBootToReady(b *testing.B) {
	a := needAppliance(b, imageMode)
	before := needApplianceIn(b, imageMode, filepath.Join(outDir(), "no-kata-parity"))
	b.Run(vm.Accel(), func(b *testing.B) {
		var ours, theirs []time.Duration
		for range b.N {
			ours = append(ours, oursToReady(b, a))
			theirs = append(theirs, oursToReady(b, before))
		}
		reportRatio(b, ours, theirs, "before")
	})
}

// reportRatio reports the median, minimum and maximum of ours and of the baseline, the ratio of the
// medians and the sample count.
func reportRatio(b *testing.B, ours, theirs []time.Duration, baseName string) {
	slices.Sort(ours)
	slices.Sort(theirs)
	ms := func(d time.Duration) float64 { return float64(d.Milliseconds()) }
	med := func(d []time.Duration) time.Duration { return d[len(d)/2] }
	b.ReportMetric(ms(med(ours)), "ours-p50-ms")
	b.ReportMetric(ms(ours[0]), "ours-min-ms")
	b.ReportMetric(ms(ours[len(ours)-1]), "ours-max-ms")
	b.ReportMetric(ms(med(theirs)), baseName+"-p50-ms")
	b.ReportMetric(ms(theirs[0]), baseName+"-min-ms")
	b.ReportMetric(ms(theirs[len(theirs)-1]), baseName+"-max-ms")
	b.ReportMetric(float64(med(ours))/float64(med(theirs)), "ratio")
	b.ReportMetric(float64(len(ours)), "samples")
}
