package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/allox-os/allox/internal/artifact"
)

// kernelBuild is what the kernel cache records of a build (build.json beside its bzImage): the
// builder writes the compile duration when it compiles, so the bench reports it without rebuilding.
type kernelBuild struct {
	Seconds float64 `json:"seconds"`
	Jobs    int     `json:"jobs"`
}

// readKernelBuild finds the cached build an output directory's kernel came from, by the build key
// its manifest records.
func readKernelBuild(out string) (kernelBuild, error) {
	var kb kernelBuild
	data, err := os.ReadFile(filepath.Join(out, artifact.Manifest))
	if err != nil {
		return kb, err
	}
	var prov struct {
		Key string `json:"kernel_build_key"`
	}
	if err := json.Unmarshal(data, &prov); err != nil {
		return kb, err
	}
	if prov.Key == "" {
		return kb, fmt.Errorf("%s names no kernel_build_key", filepath.Join(out, artifact.Manifest))
	}
	p := filepath.Join(artifact.CacheDir(), "kernel", "builds", prov.Key, "build.json")
	data, err = os.ReadFile(p)
	if err != nil {
		return kb, fmt.Errorf("kernel build record: %w (the kernel cache %s lost the build: rebuild it)", err, artifact.CacheDir())
	}
	return kb, json.Unmarshal(data, &kb)
}

// parity compares the appliance (out) with the same appliance built without the Kata parity
// fragments (before): bzImage size, and the kernel compile time the cache recorded for each.
func parity(w io.Writer, out, before string) error {
	ours, err := size(filepath.Join(out, artifact.Kernel))
	if err != nil {
		return err
	}
	base, err := size(filepath.Join(before, artifact.Kernel))
	if err != nil {
		return fmt.Errorf("%w (make bench builds it from qemu-tests/testdata/no-kata-parity.hcl)", err)
	}
	const what = "the same kernel without the 80-kata-* fragments"
	row(w, "kernel bzImage size, Kata parity", float64(ours)/mib, float64(base)/mib, "MiB", what)
	a, err := readKernelBuild(out)
	if err != nil {
		return err
	}
	b, err := readKernelBuild(before)
	if err != nil {
		return err
	}
	row(w, fmt.Sprintf("kernel compile, Kata parity (-j%d/-j%d)", a.Jobs, b.Jobs), a.Seconds, b.Seconds, "s", what+" (as the cache recorded it)")
	return nil
}
