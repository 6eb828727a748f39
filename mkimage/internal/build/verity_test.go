package build

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"github.com/allox-os/allox/internal/testenv"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/google/go-cmp/cmp"

	"github.com/allox-os/allox/deploy/kata"
	"github.com/allox-os/allox/internal/artifact"
	"github.com/allox-os/allox/kernel"
	"github.com/allox-os/allox/mkimage/internal/spec"
	"github.com/allox-os/allox/rootfs"
)

// buildVerity runs the real pipeline on qemu-tests/testdata/verity.hcl (the default image with
// rootfs.verity = true) into a fresh output directory; the kernel must be in the cache.
func buildVerity(t *testing.T) (string, *Result) {
	t.Helper()
	if testing.Short() {
		t.Skip("runs the whole image pipeline; run without -short")
	}
	root, _ := filepath.Abs("../../..")
	file := filepath.Join(root, "qemu-tests", "testdata", "verity.hcl")
	text, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	img, diags := spec.Parse(file, text, filepath.Dir(file))
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	if _, ok := (&kernel.Builder{CacheDir: artifact.CacheDir()}).Cached(KernelSpec(img, 0, 0)); !ok {
		testenv.Unavailable(t, "the default kernel is not in the cache %s: run make image first (make test builds it before the tests)", artifact.CacheDir())
	}
	img.Output.Dir = t.TempDir()
	var progress bytes.Buffer
	res, err := Run(context.Background(), Options{Spec: img, SpecText: text, ModuleRoot: root,
		CacheDir: artifact.CacheDir(), Progress: &progress})
	if err != nil {
		t.Fatalf("build: %v\n%s", err, progress.String())
	}
	return img.Output.Dir, res
}

// TestVerityImageArtifacts builds the verity image and checks every place its hash tree shows up:
// the second partition (verified against the first by veritysetup), out/kernel_verity_params,
// boot.json (params and a command line that boots through /dev/dm-0), and both Kata drop-ins.
func TestVerityImageArtifacts(t *testing.T) {
	out, res := buildVerity(t)
	img := filepath.Join(out, artifact.Rootfs)
	table := tool(t, "sfdisk", "-d", img)
	if !strings.Contains(table, "type=83") || !strings.Contains(table, img+"2 : ") || strings.Contains(table, img+"3 : ") {
		t.Errorf("want two Linux partitions:\n%s", table)
	}
	raw, err := os.ReadFile(filepath.Join(out, artifact.VerityParams))
	if err != nil {
		t.Fatal(err)
	}
	params := strings.TrimSuffix(string(raw), "\n")
	v, err := kata.ParseKernelVerityParams(params)
	if err != nil || strings.Contains(params, "\n") {
		t.Fatalf("%s %q is not one line of kernel_verity_params: %v", artifact.VerityParams, raw, err)
	}
	bi, err := artifact.ReadBootInfo(out)
	if err != nil {
		t.Fatal(err)
	}
	wantCmdline, err := kata.VerityCmdline(params, kata.VirtioBlkData, kata.VirtioBlkHash, "ext4")
	if err != nil {
		t.Fatal(err)
	}
	if bi.KernelVerityParams != params {
		t.Errorf("boot.json kernel_verity_params %q, %s %q", bi.KernelVerityParams, artifact.VerityParams, params)
	}
	if diff := cmp.Diff(wantCmdline, bi.ImageCmdline); diff != "" {
		t.Errorf("boot.json image_cmdline (-want +got):\n%s", diff)
	}
	for _, name := range []string{"config.d/50-allox.toml", "runtime-rs/config.d/50-allox.toml"} {
		var cfg struct {
			Hypervisor map[string]map[string]any `toml:"hypervisor"`
		}
		if _, err := toml.DecodeFile(filepath.Join(out, artifact.KataDir, name), &cfg); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got := cfg.Hypervisor["qemu"]["kernel_verity_params"]; got != params {
			t.Errorf("%s: kernel_verity_params %v, want %q", name, got, params)
		}
	}
	checkTree(t, img, int64(v.DataBlocks)*int64(v.DataBlockSize), params)
	t.Logf("stage %q: %.2fs", "rootfs disk image", res.StageSeconds["rootfs disk image"])
}

// checkTree extracts both partitions, checks partition 2 with veritysetup against partition 1 and
// the published params, and times a fresh FormatVerity of partition 1 (the verity share of the
// "rootfs disk image" stage), logging the figures.
func checkTree(t *testing.T, img string, dataBytes int64, params string) {
	t.Helper()
	dir := t.TempDir()
	p1, p2 := filepath.Join(dir, "p1"), filepath.Join(dir, "p2")
	parts := mbrPartitions(t, img)
	if parts[0][1] != dataBytes || parts[1][0] != parts[0][0]+dataBytes || parts[1][0]%(1<<20) != 0 {
		t.Errorf("partitions (start, bytes) %v: want partition 1 of %d bytes, partition 2 right after it, 1 MiB aligned", parts, dataBytes)
	}
	for i, p := range []string{p1, p2} {
		tool(t, "dd", "if="+img, "of="+p, "bs=1M", fmt.Sprintf("skip=%d", parts[i][0]>>20),
			fmt.Sprintf("count=%d", parts[i][1]>>20), "status=none")
	}
	start := time.Now()
	p, err := rootfs.FormatVerity(context.Background(), p1, filepath.Join(dir, "again"), veritySaltOf(t, params))
	if err != nil {
		t.Fatal(err)
	}
	elapsed := time.Since(start)
	if p.String() != params {
		t.Errorf("re-formatting partition 1 gives %s, the build published %s", p, params)
	}
	again, _ := os.ReadFile(filepath.Join(dir, "again"))
	tree, _ := os.ReadFile(p2)
	if len(tree) < len(again) || !bytes.Equal(tree[:len(again)], again) || len(bytes.Trim(tree[len(again):], "\x00")) != 0 {
		t.Errorf("partition 2 (%d bytes) does not hold the %d-byte hash tree of partition 1 followed by zeros", len(tree), len(again))
	}
	t.Logf("partition 1: %d MiB; hash tree: %d bytes (%.2f%%) in a %d MiB partition 2; veritysetup format took %v",
		dataBytes>>20, p.HashBytes, 100*float64(p.HashBytes)/float64(dataBytes), len(tree)>>20, elapsed.Round(time.Millisecond))
}

// mbrPartitions reads the start and size in bytes of the first two entries of img's (first) MBR.
func mbrPartitions(t *testing.T, img string) [2][2]int64 {
	t.Helper()
	f, err := os.Open(img)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 512)
	if _, err := f.ReadAt(b, 0); err != nil {
		t.Fatalf("read the MBR of %s: %v", img, err)
	}
	var parts [2][2]int64
	for i := range parts {
		e := b[446+16*i:]
		parts[i] = [2]int64{int64(binary.LittleEndian.Uint32(e[8:])) * 512, int64(binary.LittleEndian.Uint32(e[12:])) * 512}
	}
	return parts
}

func veritySaltOf(t *testing.T, params string) []byte {
	t.Helper()
	v, err := kata.ParseKernelVerityParams(params)
	if err != nil {
		t.Fatal(err)
	}
	var salt []byte
	if _, err := fmt.Sscanf(v.Salt, "%x", &salt); err != nil {
		t.Fatal(err)
	}
	return salt
}
