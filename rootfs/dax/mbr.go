package dax

import (
	"errors"
	"fmt"
	"io"
	"io/fs"

	"github.com/diskfs/go-diskfs/partition/mbr"

	"github.com/allox-os/allox/rootfs/internal/mbrentry"
)

// SectorSize is the MBR's logical sector size.
const SectorSize = 512

// Partition is one used MBR entry.
type Partition struct {
	Index   int    // 1..4
	Type    byte   // 0x83 Linux
	Start   uint32 // first sector
	Sectors uint32 // length in sectors
}

// Offset is the partition's start in bytes from its table.
func (p Partition) Offset() int64 { return int64(p.Start) * SectorSize }

// Bytes is the partition's length in bytes.
func (p Partition) Bytes() int64 { return int64(p.Sectors) * SectorSize }

// ReadMBR reads the MBR at byte base of r (0 for a plain image, HeaderSize for MBR #2 behind a DAX
// header) with go-diskfs and returns its used entries in table order.
func ReadMBR(r io.ReaderAt, base int64) ([]Partition, error) {
	t, err := mbr.Read(&window{r: r, base: base}, SectorSize, SectorSize)
	if err != nil {
		return nil, fmt.Errorf("MBR at byte %d: %w", base, err)
	}
	var parts []Partition
	for _, p := range t.Partitions {
		if p.Type == mbr.Empty && p.Size == 0 {
			continue
		}
		parts = append(parts, Partition{Index: p.Index, Type: byte(p.Type), Start: p.Start, Sectors: p.Size})
	}
	return parts, nil
}

// writeMBR writes a fresh MBR holding parts at byte base of w, with go-diskfs. Fields other than the
// entries and the 0x55AA signature stay as they are (zero in a new file).
func writeMBR(w io.WriterAt, base int64, parts []Partition, diskBytes int64) error {
	t := &mbr.Table{LogicalSectorSize: SectorSize, PhysicalSectorSize: SectorSize}
	for _, p := range parts {
		t.Partitions = append(t.Partitions, mbrentry.New(p.Index, mbr.Type(p.Type), p.Start, p.Sectors))
	}
	if err := t.Write(&window{w: w, base: base}, diskBytes); err != nil {
		return fmt.Errorf("MBR at byte %d: %w", base, err)
	}
	return nil
}

// window presents r or w from byte base on as the file go-diskfs reads and writes tables through;
// only ReadAt and WriteAt are used.
type window struct {
	r    io.ReaderAt
	w    io.WriterAt
	base int64
}

var errWindow = errors.New("dax: only ReadAt and WriteAt are supported")

func (f *window) ReadAt(p []byte, off int64) (int, error) {
	if f.r == nil {
		return 0, errWindow
	}
	return f.r.ReadAt(p, f.base+off)
}

func (f *window) WriteAt(p []byte, off int64) (int, error) {
	if f.w == nil {
		return 0, errWindow
	}
	return f.w.WriteAt(p, f.base+off)
}

func (f *window) Read([]byte) (int, error)       { return 0, errWindow }
func (f *window) Seek(int64, int) (int64, error) { return 0, errWindow }
func (f *window) Stat() (fs.FileInfo, error)     { return nil, errWindow }
func (f *window) Close() error                   { return nil }
