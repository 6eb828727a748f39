// Package rebuild is `mkimage rebuild ATTESTATION`: an independent rebuild from the inputs a signed
// provenance names, compared output by output with its subjects. It gets exactly those inputs (the
// source tree by its git tree hash, the spec by its text and sha256, the Go modules go.sum pins,
// the Debian packages at their versions, the toolchain at its versions) and refuses, naming it, any
// it cannot get as recorded. The kernel comes from the cache by its build key, as make repro-check
// does: a rebuild never compiles one.
package rebuild

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"

	"github.com/allox-os/allox/internal/artifact"
	"github.com/allox-os/allox/internal/attestation"
	"github.com/allox-os/allox/kernel"
	"github.com/allox-os/allox/mkimage/internal/attest"
	"github.com/allox-os/allox/mkimage/internal/build"
	"github.com/allox-os/allox/mkimage/internal/repro"
	"github.com/allox-os/allox/mkimage/internal/spec"
)

// Options configure a rebuild.
type Options struct {
	// Attestation is the signed provenance (an attestation.intoto.jsonl).
	Attestation string
	// Key, when set, must have signed it; nil reads the statement without checking who signed it.
	Key *attestation.Key
	// Repo is a checkout of the Allox repository whose object store holds the source tree.
	Repo string
	// CacheDir is the cache the kernel is taken from (by its key); nothing else is taken from it.
	CacheDir string
	// Scratch is an empty directory for the source, the fresh cache and the rebuilt outputs.
	Scratch  string
	Progress io.Writer
}

// Result is what the rebuild found.
type Result struct {
	Image string
	Out   string // the rebuilt outputs
	// Subjects is how many outputs the statement names; Differences the ones the rebuild did not
	// reproduce, sorted, each with where it first differs (as mkimage diff names it).
	Subjects    int
	Differences []repro.Difference
}

// Reproduced says every subject was rebuilt byte for byte.
func (r *Result) Reproduced() bool { return len(r.Differences) == 0 }

// Run rebuilds what o.Attestation describes.
func Run(ctx context.Context, o Options) (*Result, error) {
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	rec, err := read(ctx, o)
	if err != nil {
		return nil, err
	}
	src, cache, out := filepath.Join(o.Scratch, "src"), filepath.Join(o.Scratch, "cache"), filepath.Join(o.Scratch, "out")
	srcDeps := rec.byKind(attest.KindSource)
	if len(srcDeps) != 1 {
		return nil, fmt.Errorf("%w: the provenance names %d source trees, want 1", ErrUnavailable, len(srcDeps))
	}
	fmt.Fprintf(o.Progress, "rebuild: source tree %s into %s\n", srcDeps[0].digest["gitTree"], src)
	if err := checkoutSource(ctx, o.Repo, src, srcDeps[0]); err != nil {
		return nil, err
	}
	img, err := writeSpec(rec, src)
	if err != nil {
		return nil, err
	}
	if err := checkInputs(rec, src); err != nil {
		return nil, err
	}
	if err := checkGoModules(rec, src); err != nil {
		return nil, err
	}
	if err := checkTools(ctx, rec); err != nil {
		return nil, err
	}
	if err := scratchCache(o.CacheDir, cache); err != nil {
		return nil, err
	}
	if err := checkKernel(rec, img, cache); err != nil {
		return nil, err
	}
	img.Output.Dir = out
	fmt.Fprintf(o.Progress, "rebuild: building %s (SOURCE_DATE_EPOCH=%d) into %s\n", rec.image, rec.epoch, out)
	res, err := build.Run(ctx, build.Options{Spec: img, SpecText: rec.specText, ModuleRoot: src, CacheDir: cache,
		Epoch: rec.epoch, Progress: o.Progress})
	if err != nil {
		return nil, fmt.Errorf("rebuild: %w", err)
	}
	if err := checkPackages(rec, res.Provenance); err != nil {
		return nil, err
	}
	diffs, err := compare(rec, filepath.Dir(o.Attestation), out)
	if err != nil {
		return nil, err
	}
	return &Result{Image: rec.image, Out: out, Subjects: len(rec.subjects), Differences: diffs}, nil
}

// read opens the attestation (checking the signature when a key is given) and decodes it.
func read(ctx context.Context, o Options) (*recorded, error) {
	env, err := attestation.ReadEnvelope(o.Attestation)
	if err != nil {
		return nil, err
	}
	var payload []byte
	if o.Key != nil {
		payload, err = attestation.Open(ctx, env, o.Key)
	} else {
		payload, err = env.DecodeB64Payload()
	}
	if err != nil {
		return nil, err
	}
	st, err := attestation.ParseStatement(payload)
	if err != nil {
		return nil, err
	}
	rec, err := readProvenance(st)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", o.Attestation, err)
	}
	return rec, nil
}

// writeSpec puts the recorded spec text at its recorded path in the source tree (checking its
// sha256) and parses it there, so its relative paths name the tree's files.
func writeSpec(rec *recorded, src string) (*spec.Image, error) {
	d := dep{kind: "spec", name: rec.specPath}
	sum := sha256.Sum256(rec.specText)
	if got := hex.EncodeToString(sum[:]); got != rec.specSHA {
		return nil, unavailable(d, "the recorded text has sha256 %s, the provenance records %s", got, rec.specSHA)
	}
	if filepath.IsAbs(rec.specPath) || !filepath.IsLocal(filepath.FromSlash(rec.specPath)) {
		return nil, unavailable(d, "the spec lies outside the source tree: only a spec in the tree can be rebuilt")
	}
	file := filepath.Join(src, filepath.FromSlash(rec.specPath))
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(file, rec.specText, 0o644); err != nil {
		return nil, err
	}
	img, diags := spec.Parse(file, rec.specText, filepath.Dir(file))
	if diags.HasErrors() {
		return nil, fmt.Errorf("the recorded spec %s: %s", rec.specPath, diags.Error())
	}
	return img, nil
}

// scratchCache is a fresh cache sharing only the kernel builds and sources with cacheDir, as
// make repro-check's: the Debian userland is fetched afresh.
func scratchCache(cacheDir, cache string) error {
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return err
	}
	for _, d := range []string{"kernel", "sources"} {
		real := filepath.Join(cacheDir, d)
		if err := os.MkdirAll(real, 0o755); err != nil {
			return err
		}
		if err := os.Symlink(real, filepath.Join(cache, d)); err != nil {
			return err
		}
	}
	return nil
}

// checkKernel refuses unless the kernel the spec resolves to is in the cache under the recorded
// build key: mkimage rebuild never compiles a kernel.
func checkKernel(rec *recorded, img *spec.Image, cache string) error {
	d := dep{kind: "kernel-build", name: rec.kernelKey}
	res, ok := (&kernel.Builder{CacheDir: cache}).Cached(build.KernelSpec(img, rec.epoch, 0))
	switch {
	case !ok:
		return unavailable(d, "not in the cache %s: mkimage rebuild never compiles a kernel; build it once (make image, or make repro-kernel to check it)", cache)
	case res.Key != rec.kernelKey:
		return unavailable(d, "the spec's kernel has build key %s here (another toolchain?)", res.Key)
	}
	return nil
}

// compare checks every subject against the rebuilt output; a difference is described as mkimage
// diff does, against the original file when it lies beside the attestation with the recorded hash.
func compare(rec *recorded, origDir, out string) ([]repro.Difference, error) {
	var diffs []repro.Difference
	for name, want := range rec.subjects {
		p := filepath.Join(out, filepath.FromSlash(name))
		got, err := artifact.SHA256File(p)
		if os.IsNotExist(err) {
			diffs = append(diffs, repro.Difference{Artifact: name, Detail: "not rebuilt: only in the attestation"})
			continue
		}
		if err != nil {
			return nil, err
		}
		if got == want {
			continue
		}
		detail := fmt.Sprintf("sha256 %s, the attestation records %s", got, want)
		orig := filepath.Join(origDir, filepath.FromSlash(name))
		if have, err := artifact.SHA256File(orig); err == nil && have == want {
			if d, err := repro.Files(orig, p); err == nil && d != "" {
				detail = d
			}
		}
		diffs = append(diffs, repro.Difference{Artifact: name, Detail: detail})
	}
	rebuilt, err := build.OutputFiles(out)
	if err != nil {
		return nil, err
	}
	for _, name := range append(rebuilt, artifact.Manifest) {
		if _, ok := rec.subjects[name]; !ok {
			diffs = append(diffs, repro.Difference{Artifact: name, Detail: "only in the rebuild: not a subject of the attestation"})
		}
	}
	sort.Slice(diffs, func(i, j int) bool { return diffs[i].Artifact < diffs[j].Artifact })
	return diffs, nil
}
