package repro_test

import (
	"bytes"
	"context"
	"github.com/allox-os/allox/internal/testenv"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/allox-os/allox/internal/artifact"
	"github.com/allox-os/allox/kernel"
	"github.com/allox-os/allox/mkimage/internal/build"
	"github.com/allox-os/allox/mkimage/internal/repro"
	"github.com/allox-os/allox/mkimage/internal/spec"
)

// buildSpec runs the real pipeline on text (the default spec, perhaps edited) into a fresh directory,
// with the kernel and the Debian userland from the cache.
func buildSpec(t *testing.T, text []byte) string {
	t.Helper()
	root, _ := filepath.Abs("../../..")
	file := filepath.Join(root, "images", "allox.hcl")
	img, diags := spec.Parse(file, text, filepath.Dir(file))
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	if _, ok := (&kernel.Builder{CacheDir: artifact.CacheDir()}).Cached(build.KernelSpec(img, 0, 0)); !ok {
		testenv.Unavailable(t, "the default kernel is not in the cache %s: run make image first (make test builds it before the tests)", artifact.CacheDir())
	}
	img.Output.Dir = t.TempDir()
	var progress bytes.Buffer
	_, err := build.Run(context.Background(), build.Options{Spec: img, SpecText: text, ModuleRoot: root,
		CacheDir: artifact.CacheDir(), Progress: &progress})
	if err != nil {
		t.Fatalf("build: %v\n%s", err, progress.String())
	}
	return img.Output.Dir
}

// TestOneInputByte builds the default spec twice and proves the outputs byte-identical (and
// verified against their manifest), then builds it with one byte of the spec changed (the hostname)
// and proves the comparison fails naming the artifacts that carry the hostname or the spec hash, and
// not the kernel.
func TestOneInputByte(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the image three times; run without -short")
	}
	text, err := os.ReadFile("../../../images/allox.hcl")
	if err != nil {
		t.Fatal(err)
	}
	a, b := buildSpec(t, text), buildSpec(t, text)
	if diffs, err := repro.Dirs(a, b); err != nil || len(diffs) != 0 {
		t.Fatalf("two builds of the same spec differ: %v %v", diffs, err)
	}
	if findings, err := build.Verify(a); err != nil || len(findings) != 0 {
		t.Errorf("mkimage verify on a fresh build: %v %v", findings, err)
	}

	edited := bytes.Replace(text, []byte(`hostname = "allox"`), []byte(`hostname = "alloy"`), 1)
	if bytes.Equal(edited, text) {
		t.Fatal("images/allox.hcl no longer sets hostname = \"allox\"; change another byte")
	}
	diffs, err := repro.Dirs(a, buildSpec(t, edited))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, d := range diffs {
		t.Log(d)
		got[d.Artifact] = d.Detail
	}
	want := map[string]string{ // artifact → what its detail must say
		artifact.Initramfs: "cpio entry etc/allox/manifest.json: data differs at byte ", // the service manifest holds the hostname
		artifact.Rootfs:    "first differing byte at offset ",                           // the DAX uuid or the ext4 superblock: both derive from the spec
		artifact.Manifest:  "line ",
		build.SBOMName:     "line ",
	}
	for name, detail := range want {
		if !strings.Contains(got[name], detail) {
			t.Errorf("%s: detail %q, want it to contain %q", name, got[name], detail)
		}
	}
	for _, name := range []string{artifact.Kernel, artifact.Vmlinux, artifact.KernelConfig} {
		if d, ok := got[name]; ok {
			t.Errorf("%s differs although the hostname does not reach the kernel: %s", name, d)
		}
	}
}
