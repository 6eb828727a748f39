package installer

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	securejoin "github.com/cyphar/filepath-securejoin"
)

// host maps an absolute host path into Root, resolving symlinks as the host would: an absolute
// link (/opt -> /var/opt) is followed inside Root, never into the pod's own filesystem.
func (o Options) host(p string) (string, error) {
	return securejoin.SecureJoin(o.Root, filepath.FromSlash(p))
}

func (o Options) readHost(p string) ([]byte, error) {
	hp, err := o.host(p)
	if err != nil {
		return nil, err
	}
	return os.ReadFile(hp)
}

func (o Options) writeHost(p string, data []byte, mode os.FileMode) error {
	hp, err := o.host(p)
	if err != nil {
		return err
	}
	return writeFrom(hp, bytes.NewReader(data), mode)
}

func (o Options) statHost(p string) (fs.FileInfo, error) {
	hp, err := o.host(p)
	if err != nil {
		return nil, err
	}
	return os.Stat(hp)
}

func (o Options) removeHost(p string) error {
	hp, err := o.host(p)
	if err != nil {
		return err
	}
	return os.Remove(hp)
}

// watched are the host directories below which an install creates directories: the state, the
// artifacts (/opt/allox/<name>), Kata's configuration and containerd's.
func (o Options) watched() []string {
	w := []string{StateRoot, "/opt/allox", "/etc/kata-containers", "/etc/containerd"}
	if o.ConfigDir != "" {
		w = append(w, o.ConfigDir)
	}
	return w
}

// dirs lists the host directories that exist along and below the watched paths.
func (o Options) dirs() (map[string]bool, error) {
	have := map[string]bool{}
	for _, w := range o.watched() {
		for d := path.Dir(w); d != "/"; d = path.Dir(d) {
			if st, err := o.statHost(d); err == nil && st.IsDir() {
				have[d] = true
			}
		}
		top, err := o.host(w)
		if err != nil {
			return nil, err
		}
		err = filepath.WalkDir(top, func(p string, d fs.DirEntry, err error) error {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			if err != nil || !d.IsDir() {
				return err
			}
			r, err := filepath.Rel(o.Root, p)
			have["/"+filepath.ToSlash(r)] = true
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	return have, nil
}

// newDirs adds to prev the watched directories that exist now and did not before, deepest first.
func (o Options) newDirs(before map[string]bool, prev []string) []string {
	now, err := o.dirs()
	if err != nil {
		return prev
	}
	for d := range now {
		if !before[d] && !slices.Contains(prev, d) {
			prev = append(prev, d)
		}
	}
	slices.SortFunc(prev, func(a, b string) int {
		if c := strings.Count(b, "/") - strings.Count(a, "/"); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	return prev
}

// removeDirs removes the directories Install created, deepest first; one that something else has
// since filled is left, and named.
func (o Options) removeDirs(dirs []string) error {
	var left []string
	for _, d := range dirs {
		err := o.removeHost(d)
		switch {
		case err == nil, errors.Is(err, fs.ErrNotExist):
		case errors.Is(err, syscall.ENOTEMPTY), errors.Is(err, syscall.EEXIST):
			left = append(left, d)
		default:
			return err
		}
	}
	if len(left) > 0 {
		o.logf("left in place, not empty: %s", strings.Join(left, " "))
	}
	return nil
}

// copyTree copies the regular files below src into dst (0755 directories; 0755 for executables,
// else 0644), each through a temporary file renamed into place.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		r, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, r)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		st, err := d.Info()
		if err != nil {
			return err
		}
		mode := os.FileMode(0o644)
		if st.Mode()&0o100 != 0 {
			mode = 0o755
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		return writeFrom(target, f, mode)
	})
}

// writeFrom writes r to p through p.allox-new, renamed over p once complete.
func writeFrom(p string, r io.Reader, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	tmp := p + ".allox-new"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, r)
	if err = errors.Join(err, f.Chmod(mode), f.Sync(), f.Close()); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, p)
}
