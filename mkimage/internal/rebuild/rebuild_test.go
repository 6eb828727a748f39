package rebuild_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/allox-os/allox/internal/artifact"
	"github.com/allox-os/allox/internal/attestation"
	"github.com/allox-os/allox/internal/attestation/attestationtest"
	"github.com/allox-os/allox/internal/testenv"
	"github.com/allox-os/allox/kernel"
	"github.com/allox-os/allox/mkimage/internal/attest"
	"github.com/allox-os/allox/mkimage/internal/build"
	"github.com/allox-os/allox/mkimage/internal/rebuild"
	"github.com/allox-os/allox/mkimage/internal/spec"
)

func moduleRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func defaultSpec(t *testing.T) (*spec.Image, []byte) {
	t.Helper()
	file := filepath.Join(moduleRoot(t), "images", "allox.hcl")
	text, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	img, diags := spec.Parse(file, text, filepath.Dir(file))
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	return img, text
}

// buildSigned builds the default spec into a fresh directory (the kernel and the userland from the
// cache) and signs it; it returns the attestation and the trusted key.
func buildSigned(t *testing.T) (string, *attestation.Key, string) {
	t.Helper()
	img, text := defaultSpec(t)
	if _, ok := (&kernel.Builder{CacheDir: artifact.CacheDir()}).Cached(build.KernelSpec(img, 0, 0)); !ok {
		testenv.Unavailable(t, "the default kernel is not in the cache %s: run make image first (make test builds it before the tests)", artifact.CacheDir())
	}
	img.Output.Dir = t.TempDir()
	var progress bytes.Buffer
	if _, err := build.Run(context.Background(), build.Options{Spec: img, SpecText: text, ModuleRoot: moduleRoot(t),
		CacheDir: artifact.CacheDir(), Progress: &progress}); err != nil {
		t.Fatalf("build: %v\n%s", err, progress.String())
	}
	key, pub := attestationtest.KeyPair(t, "ed25519")
	if err := attest.Attest(context.Background(), attest.Options{Dir: img.Output.Dir, Spec: img, SpecText: text,
		ModuleRoot: moduleRoot(t), CacheDir: artifact.CacheDir(), Key: key}); err != nil {
		t.Fatal(err)
	}
	return attestation.File(img.Output.Dir), key, pub
}

func run(t *testing.T, att string, trusted *attestation.Key, cache string) (*rebuild.Result, error) {
	t.Helper()
	var progress bytes.Buffer
	res, err := rebuild.Run(context.Background(), rebuild.Options{Attestation: att, Key: trusted, Repo: moduleRoot(t),
		CacheDir: cache, Scratch: t.TempDir(), Progress: &progress})
	if err != nil {
		t.Logf("rebuild:\n%s", progress.String())
	}
	return res, err
}

// TestRebuildReproduces builds and signs the default spec, rebuilds it from the attestation alone
// (the source tree by its git tree, a fresh Debian userland, the kernel from the cache) and gets
// every output byte for byte; then the provenance names one other input (the spec with another
// hostname, re-signed) and the rebuild names the first difference as mkimage diff does.
func TestRebuildReproduces(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the image and rebuilds it twice; run without -short")
	}
	att, signer, pub := buildSigned(t)
	trusted, err := attestation.LoadKey(pub, false)
	if err != nil {
		t.Fatal(err)
	}
	res, err := run(t, att, trusted, artifact.CacheDir())
	if err != nil {
		t.Fatal(err)
	}
	if !res.Reproduced() || res.Subjects < 10 {
		t.Fatalf("rebuild of the default spec: %d subjects, differences %v", res.Subjects, res.Differences)
	}

	// One input changed: the spec the provenance names.
	env, err := attestation.ReadEnvelope(att)
	if err != nil {
		t.Fatal(err)
	}
	st, err := env.DecodeB64Payload()
	if err != nil {
		t.Fatal(err)
	}
	_, text := defaultSpec(t)
	edited := bytes.Replace(text, []byte(`hostname = "allox"`), []byte(`hostname = "alloy"`), 1)
	sum, editedSum := sha256.Sum256(text), sha256.Sum256(edited)
	st = bytes.ReplaceAll(st, []byte(hex.EncodeToString(sum[:])), []byte(hex.EncodeToString(editedSum[:])))
	st = bytes.Replace(st, []byte(`hostname = \"allox\"`), []byte(`hostname = \"alloy\"`), 1)
	if !bytes.Contains(st, []byte(`alloy`)) {
		t.Fatal("the statement does not carry the spec's hostname; change another input")
	}
	other := filepath.Join(filepath.Dir(att), "other.intoto.jsonl")
	line, err := attestation.Sign(context.Background(), st, signer)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(other, line, 0o644); err != nil {
		t.Fatal(err)
	}
	res, err = run(t, other, trusted, artifact.CacheDir())
	if err != nil {
		t.Fatal(err)
	}
	if res.Reproduced() {
		t.Fatal("a rebuild from another spec reproduced the outputs")
	}
	for _, d := range res.Differences {
		t.Log(d)
	}
	first := res.Differences[0]
	if first.Artifact != artifact.Initramfs || !strings.Contains(first.Detail, "cpio entry etc/allox/manifest.json: data differs at byte ") {
		t.Errorf("first difference %q; want the initramfs's service manifest, as mkimage diff names it", first)
	}
	for _, d := range res.Differences {
		if d.Artifact == artifact.Kernel || d.Artifact == artifact.Vmlinux {
			t.Errorf("%s differs although the hostname does not reach the kernel: %s", d.Artifact, d.Detail)
		}
	}
}

// statement signs a provenance made up for a refusal test: the checkout's HEAD tree, the default
// spec and this machine's toolchain, edited by edit.
func statement(t *testing.T, edit func(p *build.Provenance)) string {
	t.Helper()
	_, text := defaultSpec(t)
	tree, err := exec.Command("git", "-C", moduleRoot(t), "rev-parse", "HEAD:").Output()
	if err != nil {
		t.Fatal(err)
	}
	tools, err := build.Toolchain(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(text)
	p := &build.Provenance{Image: build.ImageID{Name: "allox", Version: "0.1.0"}, Toolchain: tools,
		Source:  &build.Source{GitTree: strings.TrimSpace(string(tree))},
		Inputs:  []build.Input{{Kind: "spec", Name: "images/allox.hcl", SHA256: hex.EncodeToString(sum[:])}},
		Outputs: []build.Output{{Path: "bzImage", SHA256: strings.Repeat("0", 64)}},
	}
	edit(p)
	st, err := attest.Statement(p, strings.Repeat("1", 64), attest.Definition{SpecText: text})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	key, _ := attestationtest.KeyPair(t, "ed25519")
	if err := attestation.Write(context.Background(), dir, st, key); err != nil {
		t.Fatal(err)
	}
	return attestation.File(dir)
}

// Each input the rebuild cannot get as recorded is refused, naming it, before anything is built.
func TestRebuildRefuses(t *testing.T) {
	for _, tc := range []struct {
		name  string
		edit  func(p *build.Provenance)
		cache string // "" is an empty cache
		msg   string
	}{
		{"source tree not in the repository", func(p *build.Provenance) { p.Source.GitTree = strings.Repeat("ab", 20) },
			"", "source allox: git tree abab"},
		{"fragment with another hash", func(p *build.Provenance) {
			p.Inputs = append(p.Inputs, build.Input{Kind: "fragment", Name: "kernel/fragments/00-base.conf", SHA256: strings.Repeat("0", 64)})
		}, "", "fragment kernel/fragments/00-base.conf: sha256 "},
		{"Go module go.sum does not pin", func(p *build.Provenance) {
			p.GoBinaries = []build.GoBinary{{Path: "/sbin/init", Modules: []build.GoModule{{Path: "golang.org/x/sys", Version: "v0.50.0", Sum: "h1:forged="}}}}
		}, "", "go-module golang.org/x/sys: the source tree's go.sum does not pin v0.50.0 h1:forged="},
		{"other Go toolchain", func(p *build.Provenance) {
			for i := range p.Toolchain {
				if p.Toolchain[i].Name == "go" {
					p.Toolchain[i].Version = "go1.21.0"
				}
			}
		}, "", `tool go: the provenance records "go1.21.0", this machine has`},
		{"kernel not in the cache", func(p *build.Provenance) {}, "", "mkimage rebuild never compiles a kernel"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := run(t, statement(t, tc.edit), nil, t.TempDir())
			if !errors.Is(err, rebuild.ErrUnavailable) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("rebuild: %v; want a refusal with %q", err, tc.msg)
			}
		})
	}
}
