package kataagent

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"

	"github.com/cavaliergopher/cpio"
	"github.com/klauspost/compress/zstd"
)

var (
	gzipMagic = []byte{0x1f, 0x8b}
	zstdMagic = []byte{0x28, 0xb5, 0x2f, 0xfd}
)

// fromInitrd reads the cpio twice: once for the tree (modes and symlink targets), so that Path
// resolves however the archive orders its entries, then to copy the file it resolves to.
func fromInitrd(r io.ReadSeeker, dst string) (Found, error) {
	entries := cpioTree{}
	format, err := eachEntry(r, func(name string, h *cpio.Header, _ io.Reader) (bool, error) {
		entries[name] = cpioEntry{mode: h.FileInfo().Mode(), link: h.Linkname}
		return false, nil
	})
	if err != nil {
		return Found{}, err
	}
	final, _, err := resolve(entries, Path)
	if err != nil {
		return Found{}, err
	}
	copied := false
	_, err = eachEntry(r, func(name string, _ *cpio.Header, data io.Reader) (bool, error) {
		if name != final {
			return false, nil
		}
		copied = true
		return true, writeAgent(dst, data)
	})
	if err == nil && !copied {
		err = fmt.Errorf("BUG: %s vanished between two reads of the archive", final)
	}
	return Found{Format: format, Path: final}, err
}

// eachEntry decompresses the archive from its start and calls fn for every entry, with its
// cleaned absolute name, until fn says it is done.
func eachEntry(r io.ReadSeeker, fn func(name string, h *cpio.Header, data io.Reader) (done bool, err error)) (string, error) {
	if _, err := r.Seek(0, io.SeekStart); err != nil {
		return "", err
	}
	br := bufio.NewReader(r)
	head, _ := br.Peek(4)
	var in io.Reader = br
	format := "newc cpio"
	switch {
	case bytes.HasPrefix(head, gzipMagic):
		zr, err := gzip.NewReader(br)
		if err != nil {
			return "", fmt.Errorf("gzip: %w", err)
		}
		in, format = zr, "gzip'd newc cpio"
	case bytes.HasPrefix(head, zstdMagic):
		zr, err := zstd.NewReader(br)
		if err != nil {
			return "", fmt.Errorf("zstd: %w", err)
		}
		defer zr.Close()
		in, format = zr, "zstd-compressed newc cpio"
	}
	cr := cpio.NewReader(in)
	for {
		h, err := cr.Next()
		if errors.Is(err, io.EOF) {
			return format, nil
		}
		if err != nil {
			return format, fmt.Errorf("%s: %w", format, err)
		}
		if done, err := fn(path.Clean("/"+h.Name), h, cr); done || err != nil {
			return format, err
		}
	}
}

type cpioEntry struct {
	mode fs.FileMode
	link string
}

type cpioTree map[string]cpioEntry

func (t cpioTree) lstat(p string) (cpioEntry, error) {
	if e, ok := t[p]; ok {
		return e, nil
	}
	for name := range t { // a directory implied by its entries
		if strings.HasPrefix(name, p+"/") {
			return cpioEntry{mode: fs.ModeDir | 0o755}, nil
		}
	}
	if p == "/" {
		return cpioEntry{mode: fs.ModeDir | 0o755}, nil
	}
	return cpioEntry{}, fmt.Errorf("%s: %w", p, fs.ErrNotExist)
}
