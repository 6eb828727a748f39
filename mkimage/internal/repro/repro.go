// Package repro compares two build outputs artifact by artifact and says where they first differ:
// the cpio entry of an initramfs, the file of an ext4 disk image that owns the first differing block,
// the ELF section of a kernel, the line of a text file, or else the byte offset. It is what
// `mkimage diff` and `make repro-check` use to prove that two builds are bit-for-bit identical.
package repro

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Difference is one artifact that differs between two output directories.
type Difference struct {
	Artifact string // path relative to the output directory, slash-separated
	Detail   string // where it first differs, e.g. `cpio entry etc/hostname: data differs at byte 0`
}

func (d Difference) String() string { return d.Artifact + ": " + d.Detail }

// Dirs compares every regular file and symlink below dirA and dirB, recursively, and returns the
// differences sorted by artifact path; none means the two trees are byte-identical.
func Dirs(dirA, dirB string) ([]Difference, error) {
	a, err := listFiles(dirA)
	if err != nil {
		return nil, err
	}
	b, err := listFiles(dirB)
	if err != nil {
		return nil, err
	}
	var diffs []Difference
	for name := range a {
		if !b[name] {
			diffs = append(diffs, Difference{name, "only in " + dirA})
		}
	}
	for name := range b {
		if !a[name] {
			diffs = append(diffs, Difference{name, "only in " + dirB})
			continue
		}
		detail, err := Files(filepath.Join(dirA, name), filepath.Join(dirB, name))
		if err != nil {
			return nil, fmt.Errorf("compare %s: %w", name, err)
		}
		if detail != "" {
			diffs = append(diffs, Difference{name, detail})
		}
	}
	sort.Slice(diffs, func(i, j int) bool { return diffs[i].Artifact < diffs[j].Artifact })
	return diffs, nil
}

// listFiles returns the slash-separated relative paths of every non-directory below dir, except
// hidden ones: the build's own state (mkimage build's .mkimage-state.json) names inodes and
// absolute paths of one machine and is no artifact.
func listFiles(dir string) (map[string]bool, error) {
	files := map[string]bool{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != dir && strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			return nil
		}
		rel, err := filepath.Rel(dir, p)
		files[filepath.ToSlash(rel)] = true
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir, err)
	}
	return files, nil
}

// Files compares two files and returns "" when they are byte-identical, or else where they first
// differ, in the terms of the file's format.
func Files(a, b string) (string, error) {
	if la, lb, isLink, err := links(a, b); err != nil || isLink {
		if err == nil && la != lb {
			return fmt.Sprintf("symlink to %q vs %q", la, lb), nil
		}
		return "", err
	}
	off, sizeA, sizeB, err := firstDiffFiles(a, b)
	if err != nil || off < 0 {
		return "", err
	}
	detail, err := describe(a, b, off)
	if err != nil {
		return "", err
	}
	if sizeA != sizeB {
		detail = fmt.Sprintf("%s (sizes %d and %d bytes)", detail, sizeA, sizeB)
	}
	return detail, nil
}

// links reads a and b as symlinks; isLink is false when either is not one.
func links(a, b string) (la, lb string, isLink bool, err error) {
	sa, err := os.Lstat(a)
	if err != nil {
		return "", "", false, err
	}
	sb, err := os.Lstat(b)
	if err != nil {
		return "", "", false, err
	}
	if sa.Mode()&fs.ModeSymlink == 0 || sb.Mode()&fs.ModeSymlink == 0 {
		return "", "", false, nil
	}
	if la, err = os.Readlink(a); err != nil {
		return "", "", false, err
	}
	lb, err = os.Readlink(b)
	return la, lb, true, err
}
