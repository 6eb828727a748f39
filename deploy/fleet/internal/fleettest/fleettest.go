// Package fleettest writes small build output directories for the rollout's tests: the real
// drop-ins, containerd snippets, RuntimeClasses and install.sh (rendered by deploy/kata, as
// mkimage build renders them), a few bytes standing in for the kernel and the image, and a
// manifest.json that lists them all as mkimage writes it, and an attestation of them all signed
// with a fresh key (TrustedKey). Tests of the rollout's logic use it;
// the registry round trip also runs on a real build (testenv.NeedOut).
package fleettest

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/allox-os/allox/deploy/kata"
	"github.com/allox-os/allox/internal/artifact"
	"github.com/allox-os/allox/internal/attestation/attestationtest"
)

// Out writes an output directory for image name (image mode) into a temporary directory.
func Out(tb testing.TB, name string) string {
	tb.Helper()
	dir := tb.TempDir()
	inst := kata.InstallDir(name) + "/r1"
	files, err := kata.RenderDeployment(kata.Deployment{Name: name, Release: "r1", Assets: kata.Assets{
		Kernel: path.Join(inst, "bzImage"), Image: path.Join(inst, "rootfs.img"), RootfsType: "ext4",
		KernelParams: []string{"cgroup_no_v1=all"}, DisableImageNvdimm: true,
	}})
	if err != nil {
		tb.Fatal(err)
	}
	write := func(name string, data []byte, mode os.FileMode) {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(p, data, mode); err != nil {
			tb.Fatal(err)
		}
	}
	for _, f := range files {
		mode := os.FileMode(0o644)
		if f.Executable {
			mode = 0o755
		}
		write("kata/"+f.Name, f.Data, mode)
	}
	write("bzImage", []byte("a kernel standing in for bzImage\n"), 0o644)
	write("rootfs.img", []byte("an ext4 image standing in for rootfs.img\n"), 0o644)
	write("vmlinux", []byte("not part of the payload\n"), 0o644)
	write("sbom.spdx.json", []byte(`{"spdxVersion": "SPDX-2.3"}`+"\n"), 0o644)
	WriteManifest(tb, dir, name)
	key, pub := attestationtest.KeyPair(tb, "ed25519")
	attestationtest.SignDir(tb, dir, key)
	trusted.Store(dir, pub)
	return dir
}

// trusted maps each directory Out wrote to the public key its attestation verifies with.
var trusted sync.Map

// TrustedKey is the PEM public key file that the attestation of Out's dir verifies with.
func TrustedKey(tb testing.TB, dir string) string {
	tb.Helper()
	pub, ok := trusted.Load(dir)
	if !ok {
		tb.Fatalf("BUG: %s was not written by fleettest.Out", dir)
	}
	return pub.(string)
}

// Resign signs dir again (after a test changed it on purpose) with a fresh key and returns the
// public key.
func Resign(tb testing.TB, dir string) string {
	tb.Helper()
	key, pub := attestationtest.KeyPair(tb, "ed25519")
	attestationtest.SignDir(tb, dir, key)
	trusted.Store(dir, pub)
	return pub
}

// WriteManifest (re)writes dir/manifest.json listing every other file below dir (but the
// attestation), one key per line
// as mkimage writes it (install.sh reads it with awk).
func WriteManifest(tb testing.TB, dir, name string) {
	tb.Helper()
	type output struct {
		Path   string `json:"path"`
		Size   int64  `json:"size"`
		SHA256 string `json:"sha256"`
	}
	var outs []output
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() == "manifest.json" || d.Name() == artifact.Attestation {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		r, _ := filepath.Rel(dir, p)
		s := sha256.Sum256(data)
		outs = append(outs, output{filepath.ToSlash(r), int64(len(data)), hex.EncodeToString(s[:])})
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	slices.SortFunc(outs, func(a, b output) int {
		if a.Path < b.Path {
			return -1
		}
		return 1
	})
	m := map[string]any{"image": map[string]string{"name": name, "version": "0.1.0"}, "source_date_epoch": 0, "outputs": outs}
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "manifest.json"), append(data, '\n'), 0o644); err != nil {
		tb.Fatal(err)
	}
}
