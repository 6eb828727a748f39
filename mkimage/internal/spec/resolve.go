package spec

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

var baseKeywords = []string{BaseAllnoconfig, BaseDefconfig, BaseTinyconfig}

// resolve makes every path in img absolute against base, expands the fragment globs and checks
// that every input file exists. The output directory need not exist yet.
func (d *decoder) resolve(img *Image, base string) {
	abs := func(p string) string {
		if p == "" || filepath.IsAbs(p) {
			return filepath.Clean(p)
		}
		return filepath.Join(base, p)
	}
	k := &img.Kernel
	if k.Source.Tarball != "" {
		k.Source.Tarball = abs(k.Source.Tarball)
		d.mustBeFile("kernel.source.tarball", k.Source.Tarball, base)
	}
	if k.Base != "" && !slices.Contains(baseKeywords, k.Base) {
		written := k.Base
		k.Base = abs(k.Base)
		if _, err := os.Stat(k.Base); errors.Is(err, fs.ErrNotExist) && !strings.ContainsRune(written, filepath.Separator) {
			d.errorf("kernel.base", "Unknown kernel base config",
				"base must be %s, or the path of a config file; %q is neither.%s",
				quoteList(baseKeywords), written, didYouMean(written, baseKeywords))
		} else {
			d.mustBeFile("kernel.base", k.Base, base)
		}
	}
	k.Fragments = d.expandFragments(k.Fragments, abs, base)
	for _, p := range []struct {
		key string
		dst *string
	}{{"kernel.patches", &k.Patches}, {"kernel.allowlist", &k.Allowlist}} {
		if *p.dst != "" {
			*p.dst = abs(*p.dst)
			d.mustBeFile(p.key, *p.dst, base)
		}
	}
	if a := img.Kata.Agent; a != nil {
		for _, p := range []struct {
			key string
			dst *string
		}{{"kata.agent.binary", &a.Binary}, {"kata.agent.from_image", &a.FromImage}} {
			if *p.dst != "" {
				*p.dst = abs(*p.dst)
				d.mustBeFile(p.key, *p.dst, base)
			}
		}
	}
	if p := k.KataParity; p != nil {
		for _, f := range []struct {
			key string
			dst *string
		}{{"kernel.kata_parity.symbols", &p.Symbols}, {"kernel.kata_parity.allowlist", &p.Allowlist}} {
			if *f.dst != "" {
				*f.dst = abs(*f.dst)
				d.mustBeFile(f.key, *f.dst, base)
			}
		}
	}
	if img.Output.Dir != "" {
		img.Output.Dir = abs(img.Output.Dir)
	}
}

// expandFragments expands each glob (sorted), keeping the first occurrence of each file.
func (d *decoder) expandFragments(globs []string, abs func(string) string, base string) []string {
	var files []string
	seen := map[string]bool{}
	for i, g := range globs {
		key := fmt.Sprintf("kernel.fragments.%d", i)
		pattern := abs(g)
		matches, err := filepath.Glob(pattern)
		if err != nil {
			d.errorf(key, "Invalid fragment glob", "%q is not a valid glob (%v); see Go's path/filepath.Match for the syntax.", g, err)
			continue
		}
		matched := false
		for _, m := range matches {
			if fi, err := os.Stat(m); err != nil || !fi.Mode().IsRegular() {
				continue
			}
			matched = true
			if !seen[m] {
				seen[m] = true
				files = append(files, m)
			}
		}
		if !matched {
			d.errorf(key, "Fragment glob matches no file",
				"No config fragment file matches %q (relative paths resolve against %s).%s",
				pattern, base, siblingHint(pattern))
		}
	}
	return files
}

// mustBeFile reports a missing or non-regular input file at key.
func (d *decoder) mustBeFile(key, path, base string) {
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		d.errorf(key, "File not found", "%s does not exist (relative paths resolve against %s).%s",
			path, base, siblingHint(path))
	case err != nil:
		d.errorf(key, "Cannot read file", "%v.", err)
	case !fi.Mode().IsRegular():
		d.errorf(key, "Not a regular file", "%s is a directory or special file; name a regular file.", path)
	}
}
