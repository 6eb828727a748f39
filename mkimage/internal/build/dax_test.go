package build

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/allox-os/allox/initramfs"
	"github.com/allox-os/allox/internal/artifact"
	"github.com/allox-os/allox/mkimage/internal/spec"
	"github.com/allox-os/allox/rootfs"
	"github.com/allox-os/allox/rootfs/dax"
)

// TestNvdimmStages runs the stages kata.nvdimm touches over a small real image: the DAX header
// stage, the drop-ins, the boot info and the Kata contract check (with the real kernel config of
// ../../../out when present).
func TestNvdimmStages(t *testing.T) {
	for _, nvdimm := range []bool{false, true} {
		s := nvdimmState(t, nvdimm)
		for _, st := range []stage{{"dax", writeDAXHeader}, {"kata", writeKata}, {"boot", writeBootInfo}} {
			if err := st.run(context.Background(), s); err != nil {
				t.Fatalf("nvdimm=%v: stage %s: %v", nvdimm, st.name, err)
			}
		}
		img, err := os.ReadFile(filepath.Join(s.out, artifact.Rootfs))
		if err != nil {
			t.Fatal(err)
		}
		_, herr := dax.Read(bytes.NewReader(img), int64(len(img)))
		if nvdimm && (herr != nil || len(img) != 128<<20) {
			t.Errorf("nvdimm: header %v, size %d; want a valid header and 128 MiB", herr, len(img))
		}
		if !nvdimm && herr == nil {
			t.Error("nvdimm off: the image has a DAX header")
		}
		dropIn, err := os.ReadFile(filepath.Join(s.out, artifact.KataDir, "config.d", "50-allox.toml"))
		if err != nil {
			t.Fatal(err)
		}
		if want := "disable_image_nvdimm = " + map[bool]string{true: "false", false: "true"}[nvdimm]; !strings.Contains(string(dropIn), want) {
			t.Errorf("nvdimm=%v: the drop-in lacks %q:\n%s", nvdimm, want, dropIn)
		}
		bi, err := artifact.ReadBootInfo(s.out)
		if err != nil || bi.Nvdimm != nvdimm {
			t.Errorf("boot.json nvdimm = %v (%v); want %v", bi != nil && bi.Nvdimm, err, nvdimm)
		}
		if err := checkKataContract(context.Background(), s); err != nil {
			t.Errorf("nvdimm=%v: %v", nvdimm, err)
		}
	}
}

// nvdimmState is a build state whose output directory holds a 40 MiB rootfs.img and a kernel config.
func nvdimmState(t *testing.T, nvdimm bool) *state {
	t.Helper()
	cfg, err := os.ReadFile(filepath.Join("..", "..", "..", "out", artifact.KernelConfig))
	if err != nil {
		t.Skipf("no kernel config in ../../../out (%v): run `make image`", err)
	}
	img, diags := spec.Load(filepath.Join("..", "..", "..", "images", "allox.hcl"))
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	img.Kata.Nvdimm = nvdimm
	out := t.TempDir()
	img.Output.Dir = out
	if err := os.WriteFile(filepath.Join(out, artifact.KernelConfig), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	// The drop-ins name the release by the artifacts' contents: a few bytes stand in for the kernel.
	if err := os.WriteFile(filepath.Join(out, artifact.Kernel), []byte("a kernel standing in for bzImage\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tree := &initramfs.Tree{}
	for _, f := range []struct {
		path string
		mode os.FileMode
	}{{"/sbin/init", 0o755}, {"/etc/resolv.conf", 0o644}} {
		if err := tree.AddFile(f.path, f.mode, nil); err != nil {
			t.Fatal(err)
		}
	}
	opt := rootfs.DiskOptions{SizeMiB: 40, Label: "t", UUID: "7c2a6e0e-3f7b-4d0a-9c51-2b1f0e6d4a10",
		HashSeed: "0b7f3c9e-8d21-4a46-b0e3-5f9d2c7a1e84", Mtime: time.Unix(1700000000, 0)}
	if _, err := rootfs.WriteDisk(context.Background(), filepath.Join(out, artifact.Rootfs), tree, opt); err != nil {
		t.Fatal(err)
	}
	s := newState(Options{Spec: img, SpecText: []byte("test")}, out, t.TempDir())
	s.tree = tree
	return s
}
