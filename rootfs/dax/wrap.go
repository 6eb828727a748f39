package dax

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Options fix everything about the header that is not in the image.
type Options struct {
	// Seed derives the info block's uuid (for example the spec's bytes or the filesystem UUID). It is
	// required: the uuid is never random, so the same image and seed give the same bytes.
	Seed []byte
	// SizeAlign pads the result with zeros to a multiple of it; 0 means SizeAlign (128 MiB, Kata's
	// default). It must be a positive multiple of Align (2 MiB).
	SizeAlign int64
}

func (o Options) sizeAlign() (int64, error) {
	a := o.SizeAlign
	if a == 0 {
		a = SizeAlign
	}
	if a < 0 || a%Align != 0 {
		return 0, fmt.Errorf("SizeAlign %d: want 0 (for %d MiB) or a positive multiple of %d (2 MiB), e.g. %d",
			a, SizeAlign/MiB, Align, SizeAlign)
	}
	if len(o.Seed) == 0 {
		return 0, errors.New("Seed is empty: pass bytes that identify the image (e.g. the spec text); the uuid is derived from them, never random")
	}
	return a, nil
}

// AddHeader rewrites the image at path in place, atomically: the header goes in front and the result
// is padded to a multiple of opt.SizeAlign. An image that already has a header is refused.
func AddHeader(path string, opt Options) error {
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".dax.tmp")
	os.Remove(tmp)
	if err := WrapFile(tmp, path, opt); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("add dax header to %s: %w", path, err)
	}
	return nil
}

// WrapFile writes dst: the header followed by the MBR image src, padded to opt.SizeAlign.
func WrapFile(dst, src string, opt Options) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("add dax header: %w", err)
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return fmt.Errorf("add dax header: %w", err)
	}
	out, err := os.OpenFile(dst, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("add dax header: %w", err)
	}
	total, err := Wrap(out, in, st.Size(), opt)
	if err == nil {
		err = out.Truncate(total)
	}
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("add dax header to %s: %w", src, err)
	}
	return nil
}

// Wrap writes the header and then the srcSize bytes of the MBR image src to dst (a new, zeroed,
// sparse file: zero blocks are skipped) and returns the size the result must have, a multiple of
// opt.SizeAlign; the caller extends dst to it.
func Wrap(dst io.WriterAt, src io.ReaderAt, srcSize int64, opt Options) (int64, error) {
	align, err := opt.sizeAlign()
	if err != nil {
		return 0, err
	}
	inner, err := checkSource(src, srcSize)
	if err != nil {
		return 0, err
	}
	total := (HeaderSize + srcSize + align - 1) / align * align
	outer := make([]Partition, len(inner))
	for i, p := range inner {
		outer[i] = p
		outer[i].Start += HeaderSize / SectorSize
	}
	if err := writeMBR(dst, 0, outer, total); err != nil {
		return 0, err
	}
	info := NewInfo(uuidFrom(opt.Seed), total)
	if _, err := dst.WriteAt(info.Marshal(), InfoOffset); err != nil {
		return 0, err
	}
	if err := copySparse(dst, HeaderSize, src, srcSize); err != nil {
		return 0, err
	}
	return total, nil
}

// NewInfo is the info block for a namespace (the whole image file) of total bytes: Kata's values
// (PFN signature, RAM mode, dataoff 2 MiB, align 2 MiB, zero parent uuid) in the kernel's current
// version 1.4 layout.
func NewInfo(uuid [16]byte, total int64) *Info {
	return &Info{
		Signature: Signature, UUID: uuid, VersionMajor: 1, VersionMinor: 4,
		DataOff: HeaderSize, NPFNs: uint64(total-HeaderSize) / pageSize, Mode: ModeRAM,
		Align: Align, PageSize: pageSize, PageStructSize: 64,
	}
}

// checkSource reads MBR #2 (the image's own table) and refuses what cannot be wrapped.
func checkSource(src io.ReaderAt, size int64) ([]Partition, error) {
	if size <= 0 || size%SectorSize != 0 {
		return nil, fmt.Errorf("image size %d is not a positive multiple of %d bytes", size, SectorSize)
	}
	block := make([]byte, InfoSize)
	if _, err := src.ReadAt(block, InfoOffset); err == nil && bytes.Equal(block[:16], Signature[:]) {
		return nil, errors.New("the image already has a DAX header (NVDIMM_PFN_INFO at 4 KiB): wrap the original image, not this one")
	}
	parts, err := ReadMBR(src, 0)
	if err != nil {
		return nil, fmt.Errorf("image: %w (want an MBR disk image such as mkimage's rootfs.img)", err)
	}
	if len(parts) == 0 {
		return nil, errors.New("image: the MBR has no partition")
	}
	for _, p := range parts {
		if end := p.Offset() + p.Bytes(); end > size || uint64(p.Start)+HeaderSize/SectorSize > 1<<32-1 {
			return nil, fmt.Errorf("image: partition %d (sectors %d+%d) ends past the image's %d bytes or cannot move 2 MiB", p.Index, p.Start, p.Sectors, size)
		}
	}
	return parts, nil
}

// uuidFrom derives the info block's uuid from seed (a version 4 layout with fixed content).
func uuidFrom(seed []byte) [16]byte {
	h := sha256.Sum256(append([]byte("allox nvdimm pfn uuid\n"), seed...))
	var u [16]byte
	copy(u[:], h[:16])
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	return u
}

// copySparse copies n bytes of src to dst at offset, skipping all-zero blocks.
func copySparse(dst io.WriterAt, offset int64, src io.ReaderAt, n int64) error {
	buf := make([]byte, 64<<10)
	zero := make([]byte, len(buf))
	for pos := int64(0); pos < n; {
		chunk := buf[:min(int64(len(buf)), n-pos)]
		if _, err := src.ReadAt(chunk, pos); err != nil {
			return fmt.Errorf("read image at %d: %w", pos, err)
		}
		if !bytes.Equal(chunk, zero[:len(chunk)]) {
			if _, err := dst.WriteAt(chunk, offset+pos); err != nil {
				return err
			}
		}
		pos += int64(len(chunk))
	}
	return nil
}
