package rootfs

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"

	"github.com/allox-os/allox/initramfs"
)

// Stage reads a userland tarball (plain or gzip, as Fetch or mmdebstrap writes it) into a Tree, with
// owners and modes from the tar headers and file contents held in memory. Hard links become copies.
// Modification times are dropped: the writers stamp every entry with one time of their own.
func Stage(tarball string) (*initramfs.Tree, error) {
	f, err := os.Open(tarball)
	if err != nil {
		return nil, fmt.Errorf("stage: %w", err)
	}
	defer f.Close()
	r, err := decompress(bufio.NewReaderSize(f, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("stage %s: %w", tarball, err)
	}
	t, err := readTar(r)
	if err != nil {
		return nil, fmt.Errorf("stage %s: %w", tarball, err)
	}
	return t, nil
}

func decompress(r *bufio.Reader) (io.Reader, error) {
	magic, err := r.Peek(2)
	if err == nil && magic[0] == 0x1f && magic[1] == 0x8b {
		return gzip.NewReader(r)
	}
	return r, nil
}

func readTar(r io.Reader) (*initramfs.Tree, error) {
	t := &initramfs.Tree{}
	contents := map[string][]byte{} // for hard links
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return t, nil
		}
		if err != nil {
			return nil, err
		}
		if h.Typeflag == tar.TypeXGlobalHeader {
			continue
		}
		e, err := entryFromTar(h, tr, contents)
		if err != nil {
			return nil, err
		}
		if err := t.Add(e); err != nil {
			return nil, err
		}
	}
}

func entryFromTar(h *tar.Header, r io.Reader, contents map[string][]byte) (initramfs.Entry, error) {
	p := tarPath(h.Name)
	mode := fs.FileMode(h.Mode).Perm()
	if h.Mode&0o4000 != 0 {
		mode |= fs.ModeSetuid
	}
	if h.Mode&0o2000 != 0 {
		mode |= fs.ModeSetgid
	}
	if h.Mode&0o1000 != 0 {
		mode |= fs.ModeSticky
	}
	e := initramfs.Entry{Path: p, Mode: mode, UID: h.Uid, GID: h.Gid}
	switch h.Typeflag {
	case tar.TypeDir:
		e.Mode |= fs.ModeDir
	case tar.TypeReg:
		data, err := io.ReadAll(r)
		if err != nil {
			return e, fmt.Errorf("%s: %w", h.Name, err)
		}
		e.Data = data
		contents[p] = data
	case tar.TypeLink:
		data, ok := contents[tarPath(h.Linkname)]
		if !ok {
			return e, fmt.Errorf("%s: hard link to %s, which is not an earlier regular file of the archive", h.Name, h.Linkname)
		}
		e.Data = data
	case tar.TypeSymlink:
		e.Mode |= fs.ModeSymlink
		e.Link = h.Linkname
	case tar.TypeChar:
		e.Mode |= fs.ModeDevice | fs.ModeCharDevice
		e.Major, e.Minor = uint32(h.Devmajor), uint32(h.Devminor)
	case tar.TypeBlock:
		e.Mode |= fs.ModeDevice
		e.Major, e.Minor = uint32(h.Devmajor), uint32(h.Devminor)
	case tar.TypeFifo:
		e.Mode |= fs.ModeNamedPipe
	default:
		return e, fmt.Errorf("%s: tar entry type %q is not supported in an image", h.Name, h.Typeflag)
	}
	if e.Mode.IsRegular() && e.Data == nil {
		e.Data = []byte{}
	}
	return e, nil
}

// tarPath turns "./usr/bin/x", "usr/bin/x" or "./" into a clean absolute path.
func tarPath(name string) string {
	return path.Clean("/" + name)
}
