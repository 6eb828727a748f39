package attest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path/filepath"

	"github.com/allox-os/allox/internal/artifact"
	"github.com/allox-os/allox/internal/attestation"
	"github.com/allox-os/allox/mkimage/internal/build"
	"github.com/allox-os/allox/mkimage/internal/spec"
)

// Options say what to attest: the build output directory, the spec it was built from (its text
// must be the one manifest.json records) and where the checkout and the cache are, which the plan
// names relative to.
type Options struct {
	Dir        string
	Spec       *spec.Image
	SpecText   []byte
	ModuleRoot string
	CacheDir   string
	BuilderID  string
	Key        *attestation.Key
}

// Attest renders the statement of the build in o.Dir from its manifest.json, signs it and writes
// the envelope beside the outputs. The outputs must still match the manifest.
func Attest(ctx context.Context, o Options) error {
	p, err := build.ReadProvenance(o.Dir)
	if err != nil {
		return err
	}
	if got := sha256Hex(o.SpecText); got != p.SpecSHA256() {
		return fmt.Errorf("spec %s: sha256 %s, but %s records %s: attest from the checkout and spec that built %s",
			o.Spec.File, got, artifact.Manifest, p.SpecSHA256(), o.Dir)
	}
	findings, err := build.Verify(o.Dir)
	if err != nil {
		return err
	}
	if len(findings) > 0 {
		return fmt.Errorf("%s changed after the build (%s): rebuild before signing", o.Dir, findings[0])
	}
	manifestSHA, err := artifact.SHA256File(filepath.Join(o.Dir, artifact.Manifest))
	if err != nil {
		return err
	}
	img := *o.Spec
	img.Output.Dir = o.Dir
	plan, err := Relativize(build.NewPlan(&img, o.CacheDir), map[string]string{
		o.ModuleRoot: "$SRC", o.Dir: "$OUT", o.CacheDir: "$CACHE"})
	if err != nil {
		return err
	}
	def := Definition{SpecText: o.SpecText, Plan: plan, BuilderID: o.BuilderID}
	if p.Source != nil {
		def.Commit = build.HeadCommit(ctx, o.ModuleRoot, p.Source.GitTree)
	}
	st, err := Statement(p, manifestSHA, def)
	if err != nil {
		return err
	}
	return attestation.Write(ctx, o.Dir, st, o.Key)
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
