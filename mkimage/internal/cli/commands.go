package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/allox-os/allox/internal/artifact"
	"github.com/allox-os/allox/internal/attestation"
	"github.com/allox-os/allox/kernel"
	"github.com/allox-os/allox/mkimage/internal/build"
)

type buildFlags struct {
	out   string
	cache string
	jobs  int
	sign  signFlags // mkimage build -key: sign the build (attest)
}

func parseBuildFlags(c Context, name string, args []string) (*buildFlags, []string, error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(c.Stderr)
	bf := &buildFlags{}
	fs.StringVar(&bf.out, "out", "", "output directory (default: the spec's output.dir)")
	fs.StringVar(&bf.cache, "cache", artifact.CacheDir(), "cache directory for the kernel and the Debian userland ($ALLOX_CACHE)")
	fs.IntVar(&bf.jobs, "j", 0, "kernel build jobs (default: all CPUs)")
	if name == "build" {
		bf.sign.register(fs, "sign the build with this key (a PEM file, ed25519 or ECDSA P-256, or env://VAR): writes "+artifact.Attestation)
	}
	if err := fs.Parse(args); err != nil {
		return nil, nil, err
	}
	return bf, fs.Args(), nil
}

// flagsAndSpec parses the build flags and loads the optional spec argument.
func flagsAndSpec(c Context, name string, args []string) (*buildFlags, *loaded, error) {
	bf, rest, err := parseBuildFlags(c, name, args)
	if err != nil {
		return nil, nil, err
	}
	path, err := oneOptionalArg(rest)
	if err != nil {
		return nil, nil, err
	}
	l, err := load(c, path)
	return bf, l, err
}

func runBuild(ctx context.Context, c Context, args []string) error {
	bf, l, err := flagsAndSpec(c, "build", args)
	if err != nil {
		return err
	}
	if bf.out != "" {
		if l.img.Output.Dir, err = filepath.Abs(bf.out); err != nil {
			return err
		}
	}
	epoch, err := sourceDateEpoch()
	if err != nil {
		return err
	}
	if bf.sign.key == "" { // an attestation of a previous build would name other outputs
		if err := os.Remove(attestation.File(l.img.Output.Dir)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	if _, err = build.Run(ctx, build.Options{Spec: l.img, SpecText: l.text, ModuleRoot: l.moduleRoot,
		CacheDir: bf.cache, Epoch: epoch, Jobs: bf.jobs, Progress: c.Stdout}); err != nil || bf.sign.key == "" {
		return err
	}
	return sign(ctx, c, bf.sign, l.img.Output.Dir, l, bf.cache)
}

func runValidate(ctx context.Context, c Context, args []string) error {
	if len(args) != 1 {
		return errUsage
	}
	l, err := load(c, args[0])
	if err != nil {
		return err
	}
	fmt.Fprintf(c.Stdout, "%s: ok (%s %s, %d service(s), %d kernel fragment(s))\n", args[0], l.img.Name,
		l.img.Version, len(l.img.Services), len(l.img.Kernel.Fragments))
	return nil
}

func runPlan(ctx context.Context, c Context, args []string) error {
	path, err := oneOptionalArg(args)
	if err != nil {
		return err
	}
	l, err := load(c, path)
	if err != nil {
		return err
	}
	return writeJSON(c.Stdout, build.NewPlan(l.img, artifact.CacheDir()))
}

func runKernelConfig(ctx context.Context, c Context, args []string) error {
	bf, l, err := flagsAndSpec(c, "kernel-config", args)
	if err != nil {
		return err
	}
	b := &kernel.Builder{CacheDir: bf.cache, Log: c.Stderr}
	final, _, err := b.FinalConfig(ctx, build.KernelSpec(l.img, 0, bf.jobs))
	if err != nil {
		return err
	}
	_, err = c.Stdout.Write(final)
	return err
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
