package qemutests

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/allox-os/allox/internal/baseline"
	"github.com/allox-os/allox/internal/vm"
)

// baselineBoot is Debian's stock kernel with a busybox-only initramfs.
type baselineBoot struct {
	kernel, initrd string
}

// needBaseline fetches (once, into baseline.CacheDir()) Debian's kernel and writes the initramfs.
func needBaseline(tb testing.TB) baselineBoot {
	tb.Helper()
	needQEMU(tb)
	needTool(tb, "apt-get", "the baseline kernel comes from Debian's archive")
	if _, err := os.Stat(baseline.Busybox); err != nil {
		unavailable(tb, "%s missing: apt-get install busybox-static", baseline.Busybox)
	}
	ctx, cancel := context.WithTimeout(tb.Context(), 10*time.Minute)
	defer cancel()
	kernel, err := baseline.Kernel(ctx, baseline.CacheDir())
	if err != nil {
		unavailable(tb, "Debian baseline kernel: %v (run apt-get update, then rerun: the test fetches the kernel package into %s)", err, baseline.CacheDir())
	}
	initrd := filepath.Join(tb.TempDir(), "baseline.cpio")
	f, err := os.Create(initrd)
	if err != nil {
		tb.Fatal(err)
	}
	if err := baseline.WriteInitramfs(f, baseline.Busybox); err != nil {
		tb.Fatal(err)
	}
	if err := f.Close(); err != nil {
		tb.Fatal(err)
	}
	return baselineBoot{kernel: kernel, initrd: initrd}
}

// boot starts the baseline with memMiB of memory (0: the harness default) and extra kernel
// parameters; it powers itself off after printing baseline.ReadyMarker.
func (bl baselineBoot) boot(ctx context.Context, tb testing.TB, memMiB int, cmdline ...string) *vm.VM {
	tb.Helper()
	v, err := vm.Start(ctx, tb, vm.Options{
		Kernel:    bl.kernel,
		Initrd:    bl.initrd,
		Cmdline:   append([]string{"panic=-1"}, cmdline...),
		MemoryMiB: memMiB,
	})
	if err != nil {
		tb.Fatalf("baseline boot: %v", err)
	}
	return v
}

// TestBaselineBoots boots only the benchmark's baseline: it needs no appliance artifacts.
func TestBaselineBoots(t *testing.T) {
	bl := needBaseline(t)
	ctx := testContext(t, 30*time.Second)
	v := bl.boot(ctx, t, 256)
	l, err := v.WaitForLine(ctx, baseline.ReadyMarker)
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Wait(); err != nil {
		t.Fatalf("baseline did not power off cleanly: %v", err)
	}
	checkNoKernelTrouble(t, v)
	var kernelAt time.Duration
	for _, c := range v.Console() {
		if d, ok := vm.ParseKernelTime(c.Text); ok {
			kernelAt = d
		}
	}
	t.Logf("baseline (%s, %s) ready %.3fs after QEMU start; last kernel timestamp %.3fs", filepath.Base(bl.kernel), vm.Accel(), l.At.Seconds(), kernelAt.Seconds())
}
