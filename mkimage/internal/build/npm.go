package build

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"slices"

	"github.com/allox-os/allox/rootfs"
)

// fetchNpm brings the spec's npm packages (the agents' CLIs) into the cache, each checked against
// its pinned integrity, and lays the files their bin maps name into the image as executables.
func fetchNpm(ctx context.Context, s *state) error {
	pkgs := s.opt.Spec.Rootfs.Npm
	if len(pkgs) == 0 {
		s.reused("the spec installs no npm packages")
		return nil
	}
	fetched := 0
	for _, n := range pkgs {
		dsts := slices.Sorted(maps.Keys(n.Bin))
		files := make([]string, 0, len(dsts))
		for _, dst := range dsts {
			files = append(files, n.Bin[dst])
		}
		dir, tarball, err := rootfs.FetchNpm(ctx, s.opt.CacheDir, rootfs.NpmPackage{Package: n.Package, Version: n.Version,
			Integrity: n.Integrity, Files: files}, indent(s.opt.Progress))
		if err != nil {
			return fmt.Errorf("rootfs.npm %q: %w", n.Name, err)
		}
		if !s.hashes.unchanged(tarball) {
			fetched++
		}
		for _, dst := range dsts {
			s.npm = append(s.npm, rootfs.Binary{Path: dst, Source: filepath.Join(dir, n.Bin[dst])})
		}
		if err := s.prov.addInput("npm-package", n.Package+"@"+n.Version, n.Integrity, tarball); err != nil {
			return err
		}
	}
	if fetched > 0 {
		s.ran("%d of %d npm packages new to this output directory", fetched, len(pkgs))
	} else {
		s.reused("%d npm packages cached by integrity and hashed before", len(pkgs))
	}
	return nil
}
