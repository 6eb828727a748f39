package cli

import (
	"context"
	"flag"
	"fmt"
	"path/filepath"

	"github.com/allox-os/allox/internal/artifact"
	"github.com/allox-os/allox/internal/attestation"
	"github.com/allox-os/allox/mkimage/internal/attest"
	"github.com/allox-os/allox/mkimage/internal/build"
)

// signFlags are the flags of a command that signs: the key and the builder's identity.
type signFlags struct {
	key       string
	builderID string
}

func (sf *signFlags) register(fs *flag.FlagSet, keyUsage string) {
	fs.StringVar(&sf.key, "key", "", keyUsage)
	fs.StringVar(&sf.builderID, "builder-id", attest.DefaultBuilderID, "the builder's identity (a URI) recorded in the provenance")
}

// parseInterspersed parses fs's flags before and after the positional arguments
// (mkimage verify DIR --key PUB) and returns the positional ones.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// runAttest signs the build in DIR: an in-toto statement with SLSA provenance, from its
// manifest.json and the spec it records, in a DSSE envelope beside the outputs.
func runAttest(ctx context.Context, c Context, args []string) error {
	fs := flag.NewFlagSet("attest", flag.ContinueOnError)
	fs.SetOutput(c.Stderr)
	var sf signFlags
	sf.register(fs, "the signing key: a PEM file (ed25519 or ECDSA P-256), or env://VAR")
	cache := fs.String("cache", artifact.CacheDir(), "the cache directory the build used ($ALLOX_CACHE)")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return errUsage
	}
	dir, err := filepath.Abs(pos[0])
	if err != nil {
		return err
	}
	p, err := build.ReadProvenance(dir)
	if err != nil {
		return err
	}
	root, err := findModuleRoot(".")
	if err != nil {
		return err
	}
	specFile := specPathOf(p)
	if specFile == "" {
		return fmt.Errorf("%s records no spec input: rebuild with this mkimage", artifact.Manifest)
	}
	if !filepath.IsAbs(specFile) {
		specFile = filepath.Join(root, filepath.FromSlash(specFile))
	}
	l, err := load(c, specFile)
	if err != nil {
		return err
	}
	return sign(ctx, c, sf, dir, l, *cache)
}

// sign loads the key and attests the build in dir (mkimage attest, and mkimage build -key).
func sign(ctx context.Context, c Context, sf signFlags, dir string, l *loaded, cache string) error {
	key, err := attestation.LoadKey(sf.key, true)
	if err != nil {
		return err
	}
	err = attest.Attest(ctx, attest.Options{Dir: dir, Spec: l.img, SpecText: l.text, ModuleRoot: l.moduleRoot,
		CacheDir: cache, BuilderID: sf.builderID, Key: key})
	if err != nil {
		return err
	}
	id, _ := key.KeyID()
	fmt.Fprintf(c.Stdout, "signed %s with %s (keyid %s)\n", attestation.File(dir), sf.key, id)
	return nil
}

func specPathOf(p *build.Provenance) string {
	for _, in := range p.Inputs {
		if in.Kind == "spec" {
			return in.Name
		}
	}
	return ""
}
