package repro

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/cavaliergopher/cpio"
)

// describeCpio names the first cpio entry whose header or data differ between two (possibly
// gzip-compressed) newc archives. ok is false when either file is not such an archive.
func describeCpio(a, b string) (detail string, ok bool, err error) {
	ua, errA := uncompressed(a)
	ub, errB := uncompressed(b)
	if errA != nil || errB != nil {
		return "", false, nil
	}
	off, err := firstDiff(bytes.NewReader(ua), bytes.NewReader(ub))
	if err != nil {
		return "", false, err
	}
	if off < 0 {
		return "the cpio archives are identical; the gzip streams around them differ", true, nil
	}
	ea, errA := indexCpio(ua)
	eb, errB := indexCpio(ub)
	if errA != nil || errB != nil {
		return "", false, nil
	}
	return describeEntry(ea, eb, off), true, nil
}

// uncompressed reads a cpio archive, gunzipping it when it is compressed.
func uncompressed(p string) ([]byte, error) {
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	if isGzip(data) {
		zr, err := gzip.NewReader(bytes.NewReader(data))
		if err != nil {
			return nil, err
		}
		if data, err = io.ReadAll(zr); err != nil {
			return nil, err
		}
	}
	if !isCpio(data) {
		return nil, errors.New("not a newc cpio archive")
	}
	return data, nil
}

// entry is one cpio member and where it lies in the uncompressed archive.
type entry struct {
	hdr        cpio.Header
	start, end int64 // header start, data end (before padding)
	data       []byte
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// indexCpio walks an uncompressed newc archive and records every entry with its extent.
func indexCpio(data []byte) ([]entry, error) {
	cr := &countingReader{r: bytes.NewReader(data)}
	r := cpio.NewReader(cr)
	var out []entry
	var prevEnd int64
	for {
		h, err := r.Next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		body, err := io.ReadAll(r)
		if err != nil {
			return nil, err
		}
		dataStart := cr.n - int64(len(body))
		hdrLen := align4(110 + int64(len(h.Name)) + 1)
		out = append(out, entry{hdr: *h, start: max(prevEnd, dataStart-hdrLen), end: dataStart + h.Size, data: body})
		prevEnd = dataStart + h.Size
	}
}

func align4(n int64) int64 { return (n + 3) &^ 3 }

// describeEntry names the entry of a holding offset off and says what differs in it.
func describeEntry(ea, eb []entry, off int64) string {
	for i, x := range ea {
		if off >= x.end && i+1 < len(ea) {
			continue
		}
		if i >= len(eb) {
			return fmt.Sprintf("cpio entry %s (#%d) is missing from the second archive", x.hdr.Name, i+1)
		}
		y := eb[i]
		if x.hdr.Name != y.hdr.Name {
			return fmt.Sprintf("cpio entry #%d is %s in the first archive and %s in the second (an entry was added or removed)", i+1, x.hdr.Name, y.hdr.Name)
		}
		if f := headerDiff(x.hdr, y.hdr); f != "" {
			return fmt.Sprintf("cpio entry %s: header differs: %s", x.hdr.Name, f)
		}
		if d, _ := firstDiff(bytes.NewReader(x.data), bytes.NewReader(y.data)); d >= 0 {
			return fmt.Sprintf("cpio entry %s: data differs at byte %d", x.hdr.Name, d)
		}
		return fmt.Sprintf("cpio entry %s: raw header differs at archive offset %d (device numbers or inode)", x.hdr.Name, off)
	}
	if len(eb) > len(ea) {
		return fmt.Sprintf("cpio entry %s (#%d) is missing from the first archive", eb[len(ea)].hdr.Name, len(ea)+1)
	}
	return fmt.Sprintf("uncompressed archives differ at offset %d, after the last entry", off)
}

// headerDiff names the first header field that differs, "" if none does.
func headerDiff(x, y cpio.Header) string {
	fields := []struct {
		name string
		a, b any
	}{
		{"mode", x.Mode, y.Mode}, {"uid", x.Uid, y.Uid}, {"gid", x.Guid, y.Guid},
		{"mtime", x.ModTime.Unix(), y.ModTime.Unix()}, {"size", x.Size, y.Size},
		{"nlink", x.Links, y.Links}, {"link target", x.Linkname, y.Linkname},
		{"inode", x.Inode, y.Inode}, {"checksum", x.Checksum, y.Checksum},
	}
	for _, f := range fields {
		if f.a != f.b {
			return fmt.Sprintf("%s %v vs %v", f.name, f.a, f.b)
		}
	}
	return ""
}
