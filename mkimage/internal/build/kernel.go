package build

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/allox-os/allox/internal/artifact"
	"github.com/allox-os/allox/kernel"
	"github.com/allox-os/allox/mkimage/internal/spec"
)

// KernelSpec turns the spec's kernel block into the kernel builder's input.
func KernelSpec(img *spec.Image, epoch int64, jobs int) kernel.Spec {
	k := img.Kernel
	var parity *kernel.Parity
	if p := k.KataParity; p != nil {
		parity = &kernel.Parity{Symbols: p.Symbols, Allowlist: p.Allowlist}
	}
	return kernel.Spec{
		Source: kernel.Source{DebianPackage: k.Source.DebianPackage, Version: k.Source.Version,
			Tarball: k.Source.Tarball, SHA256: k.Source.SHA256},
		Base: k.Base, Fragments: k.Fragments, Series: k.Patches, Allowlist: k.Allowlist,
		Parity: parity, Epoch: epoch, Jobs: jobs,
	}
}

func buildKernel(ctx context.Context, s *state) error {
	b := &kernel.Builder{CacheDir: s.opt.CacheDir, Log: indent(s.opt.Progress)}
	res, err := b.Build(ctx, KernelSpec(s.opt.Spec, s.opt.Epoch, s.opt.Jobs))
	if err != nil {
		return err
	}
	s.kernel = res
	if res.Cached {
		fmt.Fprintf(indent(s.opt.Progress), "kernel: build %.12s cached, not rebuilt\n", res.Key)
		s.reused("kernel build %.12s cached", res.Key)
	} else {
		s.ran("compiled kernel build %.12s", res.Key)
	}
	for src, dst := range map[string]string{res.BzImage(): artifact.Kernel, res.Vmlinux(): artifact.Vmlinux,
		res.Config(): artifact.KernelConfig} {
		if err := linkOrCopy(src, filepath.Join(s.out, dst)); err != nil {
			return err
		}
	}
	return nil
}

// linkOrCopy hard-links a cached artifact into the output (the cache and the checkout usually share a
// filesystem), copying when they do not.
func linkOrCopy(src, dst string) error {
	if a, err := os.Stat(src); err == nil {
		if b, err := os.Stat(dst); err == nil && os.SameFile(a, b) {
			return nil // linked by an earlier build: relinking would change its ctime
		}
	}
	os.Remove(dst)
	if err := os.Link(src, dst); err == nil {
		return nil
	}
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, data, 0o644)
}
