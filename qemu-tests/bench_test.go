package qemutests

import (
	"slices"
	"testing"
	"time"

	"github.com/allox-os/allox/internal/baseline"
	"github.com/allox-os/allox/qemu-tests/internal/vm"
)

// BenchmarkBootToReady measures, per iteration, QEMU start → ready for the appliance (image mode,
// fresh workspace disk, to BootDone and every ready service) and for the baseline (Debian's stock
// kernel + busybox init, to its ready marker), on the same QEMU, accelerator and memory, and
// reports both and their ratio. Run it with -benchtime=1x or 3x: an iteration is two boots. The
// sub-benchmark is named after the accelerator (kvm or tcg): ratios are comparable only within one.
func BenchmarkBootToReady(b *testing.B) {
	a := needAppliance(b, imageMode)
	bl := needBaseline(b)
	var baseCmdline []string // the same console verbosity for both
	if slices.Contains(a.info.Cmdline, "quiet") {
		baseCmdline = append(baseCmdline, "quiet")
	}
	b.Run(vm.Accel(), func(b *testing.B) {
		var ours, theirs time.Duration
		for range b.N { // alternate, so that load on the machine hits both alike
			ours += oursToReady(b, a)
			theirs += baselineToReady(b, bl, a.info.MemoryMiB, baseCmdline)
		}
		n := float64(b.N)
		oursMS, theirsMS := float64(ours.Milliseconds())/n, float64(theirs.Milliseconds())/n
		b.ReportMetric(oursMS, "ours-ms/boot")
		b.ReportMetric(theirsMS, "baseline-ms/boot")
		b.ReportMetric(oursMS/theirsMS, "ratio")
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
