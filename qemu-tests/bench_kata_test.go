package qemutests

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/allox-os/allox/internal/baseline"
	"github.com/allox-os/allox/internal/vm"
)

// BenchmarkKataBootToReady measures QEMU start → the daemon ready as Kata boots the appliance
// (Kata's machine, with its virtio-rng, and Kata's command line; the image over virtio-blk), on a
// blank store disk and on one an earlier boot formatted, beside the same kernel booting a trivial
// static init (busybox, printing a marker) on the same machine, alternating the three, one of each
// per iteration (make bench runs 10). It reports the median and range of each and the ratios of
// the medians, and prints init's step timings of the median boot of each.
func BenchmarkKataBootToReady(b *testing.B) {
	a := needAppliance(b, imageMode)
	initrd := needBaseline(b).initrd // its busybox init; the kernel is ours
	formatted := formattedDisk(b, a)
	b.Run(vm.Accel(), func(b *testing.B) {
		var blank, warm, base []bootSample
		for range b.N {
			blank = append(blank, kataToReady(b, a, blankDisk(b)))
			warm = append(warm, kataToReady(b, a, copyDisk(b, formatted)))
			base = append(base, trivialToReady(b, a, initrd))
		}
		at := func(s []bootSample) []time.Duration {
			var ds []time.Duration
			for _, x := range s {
				ds = append(ds, x.ready)
			}
			return ds
		}
		ms := func(d time.Duration) float64 { return float64(d.Milliseconds()) }
		for _, row := range []struct {
			name    string
			samples []bootSample
		}{{"blank", blank}, {"formatted", warm}, {"trivial-init", base}} {
			ds := at(row.samples)
			slices.Sort(ds)
			b.ReportMetric(ms(ds[len(ds)/2]), row.name+"-p50-ms")
			b.ReportMetric(ms(ds[0]), row.name+"-min-ms")
			b.ReportMetric(ms(ds[len(ds)-1]), row.name+"-max-ms")
			// On stdout: the testing package keeps only the first lines a benchmark logs.
			fmt.Printf("%s %s (%d boots): the median boot's steps:\n%s", b.Name(), row.name, len(ds), medianBoot(row.samples).steps)
		}
		b.ReportMetric(float64(medianOf(at(blank)))/float64(medianOf(at(base))), "blank-ratio")
		b.ReportMetric(float64(medianOf(at(warm)))/float64(medianOf(at(base))), "formatted-ratio")
		b.ReportMetric(float64(len(blank)), "samples")
	})
}

// bootSample is one boot: when it was ready, and init's step timings from its console.
type bootSample struct {
	ready time.Duration
	steps string
}

func medianOf(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

func medianBoot(s []bootSample) bootSample {
	sorted := slices.Clone(s)
	slices.SortFunc(sorted, func(a, b bootSample) int { return int(a.ready - b.ready) })
	return sorted[len(sorted)/2]
}

func kataToReady(b *testing.B, a *built, disk string) bootSample {
	ctx := testContext(b, bootBudget)
	v, _ := a.bootKata(ctx, b, kataBoot{mode: imageMode}, disk)
	ready := v.waitReady(ctx, b)
	v.Kill() // only the boot is measured
	return bootSample{ready: ready.At, steps: bootSteps(v.Console())}
}

// trivialToReady boots our kernel with the trivial init on Kata's machine, with Kata's initrd
// command line.
func trivialToReady(b *testing.B, a *built, initrd string) bootSample {
	ctx := testContext(b, bootBudget)
	opt := kataBoot{mode: imageMode}.options(b, a, "", newToken(b)) // the same machine and memory
	opt.Disks, opt.Nvdimm, opt.Initrd = nil, "", initrd
	opt.Cmdline = kataBoot{mode: initrdMode}.cmdline(b, readDropIn(b, a.dir))
	v, err := vm.Start(ctx, b, opt)
	if err != nil {
		b.Fatalf("trivial init boot: %v", err)
	}
	l, err := v.WaitForLine(ctx, baseline.ReadyMarker)
	if err != nil {
		b.Fatal(err)
	}
	v.Kill()
	return bootSample{ready: l.At, steps: fmt.Sprintf("  %s at %.3fs\n", baseline.ReadyMarker, l.At.Seconds())}
}

// formattedDisk is a store disk that one boot formatted and powered off cleanly.
func formattedDisk(b *testing.B, a *built) string {
	b.Helper()
	ctx := testContext(b, bootBudget)
	disk := blankDisk(b)
	v, _ := a.bootKata(ctx, b, kataBoot{mode: imageMode}, disk)
	v.waitReady(ctx, b)
	v.powerOff(ctx, b)
	return disk
}

// copyDisk copies a sparse disk, so that every boot starts from the same bytes.
func copyDisk(tb testing.TB, src string) string {
	tb.Helper()
	dst := filepath.Join(tb.TempDir(), "workspace.img")
	if out, err := exec.Command("cp", "--sparse=always", "--reflink=auto", src, dst).CombinedOutput(); err != nil {
		tb.Fatalf("copy %s: %v\n%s", src, err, out)
	}
	return dst
}

var (
	stepName = regexp.MustCompile(`step="([^"]*)"`)
	stepTook = regexp.MustCompile(` took=(\S+)`)
	service  = regexp.MustCompile(` service=(\S+)`)
)

// bootSteps lists, from a console, when init's first step was done (the kernel's share ends
// before), init's steps that took 10 ms or more, and when the services started and were ready and the boot was done,
// each with its console time.
func bootSteps(lines []vm.Line) string {
	var b strings.Builder
	first := true
	for _, l := range lines {
		switch {
		case strings.Contains(l.Text, `msg="step done"`):
			if first {
				fmt.Fprintf(&b, "  %7.3fs  init's first step done\n", l.At.Seconds())
				first = false
			}
			name, took := stepName.FindStringSubmatch(l.Text), stepTook.FindStringSubmatch(l.Text)
			if name == nil || took == nil {
				continue
			}
			if d, err := time.ParseDuration(took[1]); err == nil && d >= 10*time.Millisecond {
				fmt.Fprintf(&b, "  %7.3fs  %-8s %s\n", l.At.Seconds(), took[1], name[1])
			}
		case strings.Contains(l.Text, `msg="service started"`):
			if m := service.FindStringSubmatch(l.Text); m != nil {
				fmt.Fprintf(&b, "  %7.3fs  service %s started\n", l.At.Seconds(), m[1])
			}
		case strings.Contains(l.Text, `msg="service ready"`):
			if m := service.FindStringSubmatch(l.Text); m != nil {
				fmt.Fprintf(&b, "  %7.3fs  service %s ready\n", l.At.Seconds(), m[1])
			}
		case strings.Contains(l.Text, `msg="boot done"`):
			fmt.Fprintf(&b, "  %7.3fs  boot done\n", l.At.Seconds())
		}
	}
	return b.String()
}
