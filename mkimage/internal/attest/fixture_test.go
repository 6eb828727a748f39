package attest_test

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/allox-os/allox/internal/artifact"
	"github.com/allox-os/allox/mkimage/internal/attest"
	"github.com/allox-os/allox/mkimage/internal/build"
	"github.com/allox-os/allox/mkimage/internal/spec"
)

func writeFile(t *testing.T, p string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// defaultSpec is images/allox.hcl, parsed.
func defaultSpec(t *testing.T) (*spec.Image, []byte, string) {
	t.Helper()
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(root, "images", "allox.hcl")
	text, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	img, diags := spec.Parse(file, text, filepath.Dir(file))
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	return img, text, root
}

// outputDir writes a small build output as mkimage writes it: a few outputs, the SBOM rendered
// from the manifest, and manifest.json naming them all, so build.Verify passes on it.
func outputDir(t *testing.T) (string, attest.Options) {
	t.Helper()
	img, text, root := defaultSpec(t)
	dir := t.TempDir()
	files := map[string]string{"bzImage": "a kernel\n", "rootfs.img": "a disk image\n", "kata/install.sh": "#!/bin/sh\n"}
	sum := sha256.Sum256(text)
	p := &build.Provenance{Image: build.ImageID{Name: img.Name, Version: img.Version}, SourceDateEpoch: 1700000000,
		Inputs:    []build.Input{{Kind: "spec", Name: "images/allox.hcl", SHA256: hex.EncodeToString(sum[:])}},
		Toolchain: []build.Tool{{Name: "go", Version: "go1.26.8"}},
		GoBinaries: []build.GoBinary{{Path: "/sbin/init", Package: "github.com/allox-os/allox/init", GoVersion: "go1.26.8",
			Modules: []build.GoModule{{Path: "github.com/allox-os/allox", Version: "(devel)"}, {Path: "golang.org/x/sys", Version: "v0.50.0", Sum: "h1:abc="}}}},
		Source: &build.Source{GitTree: "0ab2d1f464d5fdd06d74f0eff4066ace3fac7d08"},
	}
	for name, data := range files {
		writeFile(t, filepath.Join(dir, name), []byte(data))
		s := sha256.Sum256([]byte(data))
		p.Outputs = append(p.Outputs, build.Output{Path: name, Size: int64(len(data)), SHA256: hex.EncodeToString(s[:])})
	}
	sort.Slice(p.Outputs, func(i, j int) bool { return p.Outputs[i].Path < p.Outputs[j].Path })
	sbom, err := build.EncodeSBOM(p)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, build.SBOMName), sbom)
	s := sha256.Sum256(sbom)
	p.Outputs = append(p.Outputs, build.Output{Path: build.SBOMName, Size: int64(len(sbom)), SHA256: hex.EncodeToString(s[:])})
	sort.Slice(p.Outputs, func(i, j int) bool { return p.Outputs[i].Path < p.Outputs[j].Path })
	data, err := p.Encode()
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, artifact.Manifest), data)
	if findings, err := build.Verify(dir); err != nil || len(findings) > 0 {
		t.Fatalf("BUG: the fixture does not verify: %v %v", findings, err)
	}
	return dir, attest.Options{Dir: dir, Spec: img, SpecText: text, ModuleRoot: root, CacheDir: "/var/cache/allox"}
}
