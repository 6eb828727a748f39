package initramfs

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"
)

// Limits every writer can honour: newc names and symlink targets below PATH_MAX, ext4 names at most
// NAME_MAX bytes, ids in 32 bits.
const (
	maxPath = 4095
	maxName = 255
	maxID   = 1<<32 - 1
)

// supportedMode is every fs.FileMode bit an Entry may carry.
const supportedMode = fs.ModeDir | fs.ModeSymlink | fs.ModeDevice | fs.ModeCharDevice | fs.ModeNamedPipe |
	fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky | fs.ModePerm

// ValidatePath checks that p is what a Tree accepts: absolute, clean, no "." or ".." elements, no NUL,
// elements at most 255 bytes.
func ValidatePath(p string) error {
	switch {
	case p == "":
		return fmt.Errorf("path is empty: use an absolute path such as \"/etc/hostname\"")
	case strings.IndexByte(p, 0) >= 0:
		return fmt.Errorf("path %q contains a NUL byte", p)
	case !strings.HasPrefix(p, "/"):
		return fmt.Errorf("path %q is relative: use %q", p, path.Clean("/"+p))
	case len(p) > maxPath:
		return fmt.Errorf("path %.40q... is %d bytes long; the limit is %d", p, len(p), maxPath)
	}
	for _, el := range strings.Split(p[1:], "/") {
		switch {
		case el == "..":
			return fmt.Errorf("path %q contains \"..\": name the target directly, e.g. %q", p, path.Clean(p))
		case len(el) > maxName:
			return fmt.Errorf("path %q: element %.20q... is %d bytes long; the limit is %d", p, el, len(el), maxName)
		}
	}
	if c := path.Clean(p); c != p {
		return fmt.Errorf("path %q is not clean: use %q", p, c)
	}
	return nil
}

// normalize validates e and fills in Size for regular files.
func normalize(e Entry) (Entry, error) {
	if err := ValidatePath(e.Path); err != nil {
		return e, err
	}
	if extra := e.Mode &^ supportedMode; extra != 0 {
		return e, fmt.Errorf("%s: mode %v has unsupported bits %v; only directories, regular files, symlinks, devices and fifos can be stored", e.Path, e.Mode, extra)
	}
	if e.UID < 0 || e.UID > maxID || e.GID < 0 || e.GID > maxID {
		return e, fmt.Errorf("%s: uid %d / gid %d out of range 0..%d", e.Path, e.UID, e.GID, maxID)
	}
	if e.Path == "/" && !e.IsDir() {
		return e, fmt.Errorf("/: must be a directory, not a %s", e.Kind())
	}
	regular := e.Mode.IsRegular()
	if !regular && (e.Source != "" || e.Data != nil || e.Size != 0) {
		return e, fmt.Errorf("%s: a %s has no contents: clear Source, Data and Size", e.Path, e.Kind())
	}
	isDev := e.Mode&fs.ModeDevice != 0
	if !isDev && (e.Major != 0 || e.Minor != 0) {
		return e, fmt.Errorf("%s: a %s has no device number: clear Major and Minor", e.Path, e.Kind())
	}
	isLink := e.Mode&fs.ModeSymlink != 0
	switch {
	case isLink && (e.Link == "" || len(e.Link) > maxPath || strings.IndexByte(e.Link, 0) >= 0):
		return e, fmt.Errorf("%s: symlink target %q must be 1..%d bytes without NUL", e.Path, e.Link, maxPath)
	case !isLink && e.Link != "":
		return e, fmt.Errorf("%s: a %s has no link target: clear Link", e.Path, e.Kind())
	case e.Mode&fs.ModeCharDevice != 0 && !isDev:
		return e, fmt.Errorf("%s: fs.ModeCharDevice needs fs.ModeDevice too", e.Path)
	}
	if regular {
		return sized(e)
	}
	return e, nil
}

// sized fills in the Size of a regular file from Data or from its Source.
func sized(e Entry) (Entry, error) {
	switch {
	case e.Source != "" && e.Data != nil:
		return e, fmt.Errorf("%s: set Source or Data, not both", e.Path)
	case e.Data != nil:
		if e.Size != 0 && e.Size != int64(len(e.Data)) {
			return e, fmt.Errorf("%s: Size %d does not match the %d bytes of Data; leave Size zero", e.Path, e.Size, len(e.Data))
		}
		e.Size = int64(len(e.Data))
	case e.Source != "":
		fi, err := os.Stat(e.Source)
		if err != nil {
			return e, fmt.Errorf("%s: source: %w", e.Path, err)
		}
		if !fi.Mode().IsRegular() {
			return e, fmt.Errorf("%s: source %s is a %s, not a regular file", e.Path, e.Source, kind(fi.Mode()))
		}
		if e.Size != 0 && e.Size != fi.Size() {
			return e, fmt.Errorf("%s: Size %d does not match source %s (%d bytes); leave Size zero", e.Path, e.Size, e.Source, fi.Size())
		}
		e.Size = fi.Size()
	case e.Size != 0:
		return e, fmt.Errorf("%s: Size %d without Source or Data", e.Path, e.Size)
	}
	return e, nil
}
