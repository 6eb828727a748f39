package katacheck

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"

	"github.com/cavaliergopher/cpio"
)

// cpioTree is an initramfs read whole: every entry's mode and symlink target, by path.
type cpioTree map[string]node

func readCpioTree(p string) (cpioTree, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w (want a gzip'd newc cpio)", p, err)
	}
	tree := cpioTree{"/": {mode: fs.ModeDir}}
	r := cpio.NewReader(zr)
	for {
		h, err := r.Next()
		if errors.Is(err, io.EOF) {
			return tree, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		name := path.Clean("/" + h.Name)
		tree[name] = node{mode: h.FileInfo().Mode(), link: h.Linkname}
		for dir := path.Dir(name); dir != "/"; dir = path.Dir(dir) {
			if _, ok := tree[dir]; !ok {
				tree[dir] = node{mode: fs.ModeDir | 0o755} // implied by its entries
			}
		}
	}
}

func (c cpioTree) lstat(_ context.Context, p string) (node, error) {
	if n, ok := c[path.Clean(p)]; ok {
		return n, nil
	}
	return node{}, fmt.Errorf("%s: %w", p, errNotFound)
}
