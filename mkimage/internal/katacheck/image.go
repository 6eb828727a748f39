package katacheck

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"

	"github.com/allox-os/allox/rootfs/dax"
)

const (
	mib          = 1 << 20
	rootStart    = mib / dax.SectorSize // partition 1's first sector: 2048 (1 MiB)
	linuxType    = 0x83
	nvdimmAlign  = dax.SizeAlign
	sectorAlign  = dax.SectorSize
	hashPartIdx  = 2
	maxPartCount = 2
)

// layout is the image's partitioning as a virtio-blk disk and, behind a DAX header, as /dev/pmem0.
type layout struct {
	size      int64
	header    *dax.Header // nil without a DAX header
	headerErr error       // the header's problems, when it has an info block
	outer     []dax.Partition
	fsOffset  int64 // partition 1 from the start of the file
}

// readLayout reads the MBR(s) and the DAX header once.
func (t *Target) readLayout() (*layout, error) {
	if t.layout != nil || t.lerr != nil {
		return t.layout, t.lerr
	}
	t.layout, t.lerr = readLayout(t.Image)
	return t.layout, t.lerr
}

func readLayout(path string) (*layout, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	l := &layout{size: st.Size()}
	h, err := dax.Read(f, l.size)
	switch {
	case errors.Is(err, dax.ErrNoInfo), l.size < dax.InfoOffset+dax.InfoSize:
	case h == nil: // an info block that does not parse: a header, broken
		l.header, l.headerErr = &dax.Header{Size: l.size}, err
	default:
		l.header, l.headerErr = h, err
	}
	if l.outer, err = dax.ReadMBR(f, 0); err != nil {
		return nil, err
	}
	if len(l.outer) > 0 {
		l.fsOffset = l.outer[0].Offset()
	}
	return l, nil
}

// checkPartitions: MBR #1 (and MBR #2 behind a DAX header) hold partition 1 of type Linux at
// 1 MiB (3 MiB behind the header), alone or followed by the verity hash partition.
func (t *Target) checkPartitions() error {
	l, err := t.readLayout()
	if err != nil {
		return err
	}
	if l.header == nil {
		return checkTable("MBR", l.outer, rootStart, l.size, t.Verity)
	}
	errs := []error{checkTable("MBR #1", l.outer, rootStart+dax.HeaderSize/dax.SectorSize, l.size, t.Verity)}
	if l.header.Inner != nil {
		errs = append(errs, checkTable("MBR #2 (at 2 MiB)", l.header.Inner, rootStart, l.size-dax.HeaderSize, t.Verity))
	}
	return errors.Join(errs...)
}

func checkTable(name string, parts []dax.Partition, start uint32, size int64, verity bool) error {
	want := 1
	if verity {
		want = maxPartCount
	}
	var errs []error
	if len(parts) != want {
		errs = append(errs, fmt.Errorf("%s has %d partition(s); want %d (%s)", name, len(parts), want, map[bool]string{
			false: "the root alone", true: "the root and the dm-verity hash tree"}[verity]))
	}
	for i, p := range parts {
		if p.Index != i+1 || p.Type != linuxType || p.Bytes() == 0 || p.Offset()+p.Bytes() > size {
			errs = append(errs, fmt.Errorf("%s entry %d: type %#02x, sectors %d+%d in a %d-byte disk; want entry %d, type 0x83, inside the disk",
				name, p.Index, p.Type, p.Start, p.Sectors, size, i+1))
		}
	}
	if len(parts) > 0 && parts[0].Start != start {
		errs = append(errs, fmt.Errorf("%s partition 1 starts at sector %d (%d KiB); want %d (%d MiB)",
			name, parts[0].Start, parts[0].Offset()>>10, start, int64(start)*dax.SectorSize/mib))
	}
	if len(parts) == hashPartIdx && parts[1].Start < parts[0].Start+parts[0].Sectors {
		errs = append(errs, fmt.Errorf("%s partition 2 (sector %d) overlaps partition 1 (ends at sector %d)", name, parts[1].Start, parts[0].Start+parts[0].Sectors))
	}
	return errors.Join(errs...)
}

// fsMagics are the superblock signatures of the filesystems Kata mounts, by rootfs_type.
var fsMagics = []struct {
	name  string
	off   int64
	magic []byte
}{
	{"ext4", 1024 + 56, []byte{0x53, 0xef}}, // s_magic 0xEF53, little endian
	{"erofs", 1024, binary.LittleEndian.AppendUint32(nil, 0xe0f5e1e2)},
	{"xfs", 0, []byte("XFSB")},
}

// checkRootfsType reads partition 1's superblock magic and compares it with rootfs_type.
func (t *Target) checkRootfsType() error {
	l, err := t.readLayout()
	if err != nil {
		return err
	}
	if len(l.outer) == 0 {
		return errors.New("no partition 1 to read a filesystem from")
	}
	found, err := fsType(t.Image, l.fsOffset)
	if err != nil {
		return err
	}
	if found != t.RootfsType {
		return fmt.Errorf("partition 1 (at %d MiB) holds %s but rootfs_type is %q", l.fsOffset/mib, found, t.RootfsType)
	}
	return nil
}

func fsType(path string, off int64) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	for _, m := range fsMagics {
		b := make([]byte, len(m.magic))
		if _, err := f.ReadAt(b, off+m.off); err == nil && string(b) == string(m.magic) {
			return m.name, nil
		}
	}
	return "no filesystem Kata can mount (no ext4, erofs or xfs superblock)", nil
}

// checkSize: Kata's builder makes NVDIMM images a multiple of 128 MiB; a disk is whole sectors.
func (t *Target) checkSize() error {
	l, err := t.readLayout()
	if err != nil {
		return err
	}
	align, why := int64(sectorAlign), "whole 512-byte sectors, as a virtio-blk disk"
	if t.Nvdimm {
		align, why = nvdimmAlign, "a multiple of 128 MiB, as an NVDIMM"
	}
	if l.size == 0 || l.size%align != 0 {
		return fmt.Errorf("image is %d bytes; want %s: %d bytes", l.size, why, (l.size+align-1)/align*align)
	}
	return nil
}

// checkDAX: the image attached as an NVDIMM needs a valid DAX header.
func (t *Target) checkDAX() error {
	l, err := t.readLayout()
	if err != nil {
		return err
	}
	if l.header == nil {
		return errors.New("the image has no NVDIMM PFN info block at 4 KiB but disable_image_nvdimm is false")
	}
	return l.headerErr
}
