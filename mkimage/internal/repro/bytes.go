package repro

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"unicode/utf8"
)

const chunk = 1 << 16

// firstDiff returns the offset of the first byte where a and b differ, -1 when they are identical.
// When one is a prefix of the other, the offset is the shorter one's length.
func firstDiff(a, b io.Reader) (int64, error) {
	bufA, bufB := make([]byte, chunk), make([]byte, chunk)
	ra, rb := bufio.NewReaderSize(a, chunk), bufio.NewReaderSize(b, chunk)
	var off int64
	for {
		na, errA := io.ReadFull(ra, bufA)
		nb, errB := io.ReadFull(rb, bufB)
		if errA != nil && errA != io.EOF && errA != io.ErrUnexpectedEOF {
			return 0, errA
		}
		if errB != nil && errB != io.EOF && errB != io.ErrUnexpectedEOF {
			return 0, errB
		}
		n := min(na, nb)
		for i := 0; i < n; i++ {
			if bufA[i] != bufB[i] {
				return off + int64(i), nil
			}
		}
		if na != nb {
			return off + int64(n), nil
		}
		if na < chunk {
			return -1, nil
		}
		off += int64(n)
	}
}

// firstDiffFiles is firstDiff on two files, with their sizes.
func firstDiffFiles(a, b string) (off, sizeA, sizeB int64, err error) {
	fa, err := os.Open(a)
	if err != nil {
		return 0, 0, 0, err
	}
	defer fa.Close()
	fb, err := os.Open(b)
	if err != nil {
		return 0, 0, 0, err
	}
	defer fb.Close()
	sa, err := fa.Stat()
	if err != nil {
		return 0, 0, 0, err
	}
	sb, err := fb.Stat()
	if err != nil {
		return 0, 0, 0, err
	}
	off, err = firstDiff(fa, fb)
	return off, sa.Size(), sb.Size(), err
}

// describe says where two differing files first differ, in the terms of a's format.
func describe(a, b string, off int64) (string, error) {
	head, err := readHead(a, 4096)
	if err != nil {
		return "", err
	}
	switch {
	case isGzip(head) || isCpio(head):
		if d, ok, err := describeCpio(a, b); err != nil || ok {
			return d, err
		}
	case isELF(head):
		return describeELF(a, b, off), nil
	case isBzImage(head):
		return describeBzImage(head, off), nil
	case isMBR(head):
		return describeDisk(a, off)
	case isText(a):
		return describeText(a, b)
	}
	return fmt.Sprintf("first differing byte at offset %d (0x%x)", off, off), nil
}

func readHead(p string, n int) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	buf := make([]byte, n)
	m, err := io.ReadFull(f, buf)
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		err = nil
	}
	return buf[:m], err
}

func isGzip(h []byte) bool { return len(h) >= 2 && h[0] == 0x1f && h[1] == 0x8b }
func isCpio(h []byte) bool {
	return bytes.HasPrefix(h, []byte("070701")) || bytes.HasPrefix(h, []byte("070702"))
}
func isELF(h []byte) bool { return bytes.HasPrefix(h, []byte("\x7fELF")) }
func isMBR(h []byte) bool { return len(h) >= 512 && h[510] == 0x55 && h[511] == 0xaa }

// isBzImage recognises a Linux x86 boot image by its setup header magic "HdrS" at 0x202 (it also
// ends its boot sector with 0x55aa, like an MBR).
func isBzImage(h []byte) bool { return len(h) >= 0x206 && string(h[0x202:0x206]) == "HdrS" }

// describeBzImage says which part of a bzImage holds off: the boot sector, the real-mode setup
// (setup_sects sectors after it) or the protected-mode kernel that follows.
func describeBzImage(h []byte, off int64) string {
	where := fmt.Sprintf("first differing byte at offset %d (0x%x)", off, off)
	sects := int64(h[0x1f1])
	if sects == 0 {
		sects = 4
	}
	switch setupEnd := (sects + 1) * 512; {
	case off < 512:
		return where + ", in the bzImage boot sector"
	case off < setupEnd:
		return where + ", in the bzImage real-mode setup"
	default:
		return fmt.Sprintf("%s, in the bzImage protected-mode kernel (compressed vmlinux) at +0x%x", where, off-setupEnd)
	}
}

// maxText is the largest file compared line by line.
const maxText = 16 << 20

// isText reports whether p is a small UTF-8 file without NUL bytes (JSON, TOML, a kernel .config).
func isText(p string) bool {
	st, err := os.Stat(p)
	if err != nil || st.Size() > maxText {
		return false
	}
	data, err := os.ReadFile(p)
	return err == nil && utf8.Valid(data) && !bytes.ContainsRune(data, 0)
}

// describeText names the first differing line of two text files.
func describeText(a, b string) (string, error) {
	da, err := os.ReadFile(a)
	if err != nil {
		return "", err
	}
	db, err := os.ReadFile(b)
	if err != nil {
		return "", err
	}
	la, lb := bytes.Split(da, []byte("\n")), bytes.Split(db, []byte("\n"))
	for i := 0; i < max(len(la), len(lb)); i++ {
		x, y := lineAt(la, i), lineAt(lb, i)
		if x != y {
			return fmt.Sprintf("line %d: %s vs %s", i+1, x, y), nil
		}
	}
	return fmt.Sprintf("%s: same lines, different bytes", filepath.Base(a)), nil
}

func lineAt(lines [][]byte, i int) string {
	if i >= len(lines) {
		return "(end of file)"
	}
	s := string(lines[i])
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return fmt.Sprintf("%q", s)
}
