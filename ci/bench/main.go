// Command bench measures what `make bench` reports besides boot time: artifact sizes beside Debian's
// own (stock kernel, the Debian userland the rootfs is made from), what Kata kernel parity cost
// (bzImage size and compile time beside the kernel without the parity fragments), the warm no-op
// rebuild beside hashing the same outputs, and the rebuild after an edit of one service's Go
// source beside compiling that service alone, all measured in this run. It prints one table with
// ratios, then the stage breakdown of the median incremental build.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/allox-os/allox/internal/artifact"
	"github.com/allox-os/allox/internal/baseline"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	out := fs.String("out", "out", "a built output directory (make image)")
	mkimage := fs.String("mkimage", "bin/mkimage", "the mkimage binary")
	runs := fs.Int("runs", 30, "timed no-op rebuilds")
	incRuns := fs.Int("incremental-runs", 30, "timed rebuilds after an edit of the workspace daemon's Go source")
	before := fs.String("before-parity", "", "the appliance built without the Kata parity fragments (qemu-tests/testdata/no-kata-parity.hcl); \"\" skips the parity rows")
	if err := fs.Parse(args); err != nil {
		return err
	}
	w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "measure\tours\tbaseline\tratio\tbaseline is\t")
	if err := sizes(ctx, w, *out); err != nil {
		return err
	}
	if *before != "" {
		if err := parity(w, *out, *before); err != nil {
			return err
		}
	}
	if err := rebuild(ctx, w, *mkimage, *runs); err != nil {
		return err
	}
	if err := w.Flush(); err != nil {
		return err
	}
	return incremental(ctx, stdout, *mkimage, *incRuns)
}

func size(p string) (int64, error) {
	st, err := os.Stat(p)
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}

func row(w io.Writer, name string, ours, base float64, unit, what string) {
	fmt.Fprintf(w, "%s\t%.2f %s\t%.2f %s\t%.2f\t%s\t\n", name, ours, unit, base, unit, ours/base, what)
}

const mib = 1 << 20

func sizes(ctx context.Context, w io.Writer, out string) error {
	debKernel, err := baseline.Kernel(ctx, baseline.CacheDir())
	if err != nil {
		return err
	}
	userland, err := userlandTarball(out)
	if err != nil {
		return err
	}
	pairs := []struct{ name, ours, base, what string }{
		{"kernel bzImage size", artifact.Kernel, debKernel, "Debian " + filepath.Base(debKernel) + " (modules not counted)"},
		{"initramfs.cpio.gz size", artifact.Initramfs, userland, "the Debian userland tarball it is made from"},
		{"rootfs.img size", artifact.Rootfs, userland, "the Debian userland tarball it is made from"},
	}
	for _, p := range pairs {
		ours, err := size(filepath.Join(out, p.ours))
		if err != nil {
			return err
		}
		base, err := size(p.base)
		if err != nil {
			return err
		}
		row(w, p.name, float64(ours)/mib, float64(base)/mib, "MiB", p.what)
	}
	// rootfs.img is sparse: its apparent size includes the free space Kata's guest can grow into.
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(out, artifact.Rootfs), &st); err != nil {
		return err
	}
	base, err := size(userland)
	if err != nil {
		return err
	}
	row(w, "rootfs.img blocks on disk", float64(st.Blocks*512)/mib, float64(base)/mib, "MiB", "the Debian userland tarball it is made from")
	return nil
}

// userlandTarball finds the Debian userland the build used, from the provenance manifest.
func userlandTarball(out string) (string, error) {
	data, err := os.ReadFile(filepath.Join(out, artifact.Manifest))
	if err != nil {
		return "", err
	}
	var prov struct {
		Inputs []struct{ Kind, Name string } `json:"inputs"`
	}
	if err := json.Unmarshal(data, &prov); err != nil {
		return "", err
	}
	for _, in := range prov.Inputs {
		if in.Kind == "debian-userland" {
			return filepath.Join(artifact.CacheDir(), in.Name), nil
		}
	}
	return "", fmt.Errorf("%s names no debian-userland input", artifact.Manifest)
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
