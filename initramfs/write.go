package initramfs

import (
	"bufio"
	"errors"
	"fmt"
	"github.com/klauspost/compress/gzip"
	"io"
	"io/fs"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/cavaliergopher/cpio"
)

// maxSize is the largest file a newc header can describe (8 hex digits).
const maxSize = 1<<32 - 1

// Write writes t as a newc cpio archive: entries sorted by path ("/" first, as "."), names without the
// leading slash, owners and modes from the tree, every mtime set to mtime, inode numbers counted from 1
// in that order, then the trailer. The same tree and mtime always give the same bytes.
func Write(w io.Writer, t *Tree, mtime time.Time) error {
	if mtime.Unix() < 0 || mtime.Unix() > maxSize {
		return fmt.Errorf("write cpio: mtime %v does not fit a newc header; use a time between 1970 and 2106, e.g. from SOURCE_DATE_EPOCH", mtime)
	}
	mtime = time.Unix(mtime.Unix(), 0)
	entries := t.Entries()
	subdirs := countSubdirs(entries)
	bw := bufio.NewWriterSize(w, 1<<16)
	cw := cpio.NewWriter(bw)
	for i, e := range entries {
		h := &cpio.Header{
			Name:    cpioName(e.Path),
			Mode:    cpioMode(e.Mode),
			Uid:     e.UID,
			Guid:    e.GID,
			ModTime: mtime,
			Inode:   int64(i + 1),
			Links:   1,
		}
		if e.IsDir() {
			h.Links = 2 + subdirs[e.Path]
		}
		if err := writeEntry(cw, bw, h, e); err != nil {
			return fmt.Errorf("write cpio: %s: %w", e.Path, err)
		}
	}
	if err := cw.Close(); err != nil {
		return fmt.Errorf("write cpio trailer: %w", err)
	}
	return bw.Flush()
}

// WriteGzip writes the archive of Write through gzip with a fixed header (no name, zero mtime), so the
// compressed bytes are as reproducible as the archive.
func WriteGzip(w io.Writer, t *Tree, mtime time.Time) error {
	zw, err := gzip.NewWriterLevel(w, gzip.DefaultCompression)
	if err != nil {
		return fmt.Errorf("BUG: gzip level: %w", err)
	}
	// Unix, as the kernel's own gen_init_cpio | gzip would say; mtime 0 means "none" (klauspost's writer,
	// unlike the standard library's, would encode a zero time.Time as a garbage date).
	zw.Header = gzip.Header{OS: 3, ModTime: time.Unix(0, 0)}
	if err := Write(zw, t, mtime); err != nil {
		return err
	}
	return zw.Close()
}

func writeEntry(cw *cpio.Writer, raw io.Writer, h *cpio.Header, e Entry) error {
	switch {
	case e.Mode&fs.ModeDevice != 0:
		// cavaliergopher/cpio leaves the rdev fields zero, so device headers are written here.
		if err := cw.Flush(); err != nil {
			return err
		}
		return writeDeviceHeader(raw, h, e.Major, e.Minor)
	case e.Mode&fs.ModeSymlink != 0:
		h.Size = int64(len(e.Link))
		if err := cw.WriteHeader(h); err != nil {
			return err
		}
		_, err := io.WriteString(cw, e.Link)
		return err
	case e.Mode.IsRegular():
		if e.Size > maxSize {
			return fmt.Errorf("%d bytes is more than a newc archive can hold (%d); ship it on a disk instead", e.Size, int64(maxSize))
		}
		h.Size = e.Size
		if err := cw.WriteHeader(h); err != nil {
			return err
		}
		return writeContents(cw, e)
	default:
		return cw.WriteHeader(h)
	}
}

// writeContents copies exactly e.Size bytes from Data or Source.
func writeContents(w io.Writer, e Entry) error {
	if e.Source == "" {
		_, err := w.Write(e.Data)
		return err
	}
	f, err := os.Open(e.Source)
	if err != nil {
		return err
	}
	defer f.Close()
	n, err := io.CopyN(w, f, e.Size)
	if errors.Is(err, io.EOF) {
		return fmt.Errorf("source %s shrank from %d to %d bytes while being archived", e.Source, e.Size, n)
	}
	if err != nil {
		return err
	}
	if m, _ := f.Read(make([]byte, 1)); m > 0 {
		return fmt.Errorf("source %s grew past %d bytes while being archived", e.Source, e.Size)
	}
	return nil
}

// writeDeviceHeader writes a newc header with rdevmajor/rdevminor, in the layout of writeSVR4Header.
func writeDeviceHeader(w io.Writer, h *cpio.Header, major, minor uint32) error {
	fields := []int64{h.Inode, int64(h.Mode), int64(h.Uid), int64(h.Guid), int64(h.Links), h.ModTime.Unix(),
		0, 0, 0, int64(major), int64(minor), int64(len(h.Name) + 1), 0}
	var b strings.Builder
	b.WriteString("070701")
	for _, f := range fields {
		fmt.Fprintf(&b, "%08X", f)
	}
	b.WriteString(h.Name)
	b.WriteByte(0)
	for b.Len()%4 != 0 {
		b.WriteByte(0)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func cpioName(p string) string {
	if p == "/" {
		return "."
	}
	return strings.TrimPrefix(p, "/")
}

// cpioMode is the newc mode field: the st_mode bits, which cpio's constants share.
func cpioMode(m fs.FileMode) cpio.FileMode { return cpio.FileMode(UnixMode(m)) }

// UnixMode converts a Go file mode to st_mode bits (file type, setuid/setgid/sticky, permissions),
// the encoding newc headers and ext4 inodes both use.
func UnixMode(m fs.FileMode) uint32 {
	u := uint32(m.Perm())
	switch {
	case m&fs.ModeDir != 0:
		u |= syscall.S_IFDIR
	case m&fs.ModeSymlink != 0:
		u |= syscall.S_IFLNK
	case m&fs.ModeCharDevice != 0:
		u |= syscall.S_IFCHR
	case m&fs.ModeDevice != 0:
		u |= syscall.S_IFBLK
	case m&fs.ModeNamedPipe != 0:
		u |= syscall.S_IFIFO
	default:
		u |= syscall.S_IFREG
	}
	for _, bit := range []struct {
		goBit   fs.FileMode
		unixBit uint32
	}{{fs.ModeSetuid, syscall.S_ISUID}, {fs.ModeSetgid, syscall.S_ISGID}, {fs.ModeSticky, syscall.S_ISVTX}} {
		if m&bit.goBit != 0 {
			u |= bit.unixBit
		}
	}
	return u
}

// countSubdirs returns, for each directory, how many directories it directly contains.
func countSubdirs(entries []Entry) map[string]int {
	n := map[string]int{}
	for _, e := range entries {
		if e.IsDir() && e.Path != "/" {
			n[parentOf(e.Path)]++
		}
	}
	return n
}

func parentOf(p string) string {
	i := strings.LastIndexByte(p, '/')
	if i == 0 {
		return "/"
	}
	return p[:i]
}
