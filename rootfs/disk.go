package rootfs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"time"

	diskfs "github.com/diskfs/go-diskfs"
	"github.com/diskfs/go-diskfs/partition/mbr"

	"github.com/allox-os/allox/initramfs"
)

// DiskOptions fix everything about a disk image that is not in the tree.
type DiskOptions struct {
	// SizeMiB is the size of the whole image; 0 means automatic: the content, plus 30%, plus 64 MiB,
	// rounded up to a whole MiB.
	SizeMiB int
	// Label is the ext4 volume label, at most 16 bytes.
	Label string
	// UUID is the filesystem UUID and HashSeed the directory hash seed, both fixed UUIDs that the caller
	// derives (e.g. from the image name and version), never random.
	UUID     string
	HashSeed string
	// Mtime stamps every inode (e.g. from SOURCE_DATE_EPOCH) and stands in for the clock in mke2fs.
	Mtime time.Time
}

const (
	mib             = 1 << 20
	sectorSize      = 512
	partitionOffset = 1 * mib // sector 2048, where Kata (and every partitioner) starts partition 1
	maxImageMiB     = 2<<20 - 1
)

var uuidRE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// WriteDisk writes an MBR disk image at path: one Linux (0x83) partition starting at 1 MiB (sector 2048)
// and spanning the rest, holding an ext4 filesystem populated from tree. It needs mke2fs and debugfs
// (e2fsprogs) but neither root nor loop devices. The image is written next to path and renamed into
// place; the same tree and options always give the same bytes.
func WriteDisk(ctx context.Context, path string, tree *initramfs.Tree, opt DiskOptions) error {
	entries := tree.Entries()
	sizeMiB, err := checkDiskOptions(opt, entries)
	if err != nil {
		return fmt.Errorf("write disk %s: %w", path, err)
	}
	for _, tool := range []string{"mke2fs", "debugfs"} {
		if _, err := lookTool(tool); err != nil {
			return fmt.Errorf("write disk %s: %s not found: apt-get install e2fsprogs", path, tool)
		}
	}
	work, err := os.MkdirTemp("", "allox-disk-")
	if err != nil {
		return fmt.Errorf("write disk %s: %w", path, err)
	}
	defer os.RemoveAll(work)

	fsImage := filepath.Join(work, "rootfs.ext4")
	fsBytes := int64(sizeMiB)*mib - partitionOffset
	if err := makeExt4(ctx, work, fsImage, fsBytes, entries, opt); err != nil {
		return fmt.Errorf("write disk %s: %w", path, err)
	}
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	os.Remove(tmp)
	if err := assemble(tmp, int64(sizeMiB)*mib, fsImage); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write disk %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write disk %s: %w", path, err)
	}
	return nil
}

// checkDiskOptions validates opt and returns the image size in MiB.
func checkDiskOptions(opt DiskOptions, entries []initramfs.Entry) (int, error) {
	var errs []error
	if !uuidRE.MatchString(opt.UUID) {
		errs = append(errs, fmt.Errorf("UUID %q: want a lower-case UUID such as \"7c2a6e0e-3f7b-5d0a-9c51-2b1f0e6d4a10\", derived from the image, never random", opt.UUID))
	}
	if !uuidRE.MatchString(opt.HashSeed) {
		errs = append(errs, fmt.Errorf("HashSeed %q: want a lower-case UUID, derived from the image, never random", opt.HashSeed))
	}
	if len(opt.Label) > 16 || bytes.IndexByte([]byte(opt.Label), 0) >= 0 {
		errs = append(errs, fmt.Errorf("Label %q: at most 16 bytes, e.g. %q", opt.Label, truncate(opt.Label, 16)))
	}
	if opt.Mtime.Unix() < 0 || opt.Mtime.Unix() >= 1<<32 {
		errs = append(errs, fmt.Errorf("Mtime %v: want a time between 1970 and 2106, e.g. from SOURCE_DATE_EPOCH", opt.Mtime))
	}
	for _, e := range entries {
		if bytes.ContainsAny([]byte(e.Path), "\n\r") {
			errs = append(errs, fmt.Errorf("%q: a path with a line break cannot be written to ext4 by debugfs; rename it", e.Path))
		}
	}
	content := contentBytes(entries)
	auto := int((content*13/10 + 64*mib + mib - 1) / mib)
	size := opt.SizeMiB
	switch {
	case size == 0:
		size = auto
	case size < 0 || size > maxImageMiB:
		errs = append(errs, fmt.Errorf("SizeMiB %d: want 0 (automatic, %d here) or up to %d (the MBR limit)", size, auto, maxImageMiB))
	case int64(size)*mib < content+content/10+16*mib+partitionOffset:
		errs = append(errs, fmt.Errorf("SizeMiB %d is too small for %d MiB of content: use at least %d, or 0 for automatic (%d)",
			size, content/mib, (content+content/10+16*mib+partitionOffset+mib-1)/mib, auto))
	}
	return size, errors.Join(errs...)
}

// contentBytes estimates the space the entries take in 4 KiB blocks.
func contentBytes(entries []initramfs.Entry) int64 {
	const block = 4096
	var n int64
	for _, e := range entries {
		switch {
		case e.Mode.IsRegular():
			n += (e.Size + block - 1) / block * block
		case e.IsDir(), e.Mode&fs.ModeSymlink != 0 && len(e.Link) >= 60:
			n += block
		}
	}
	return n
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// assemble creates the disk image with go-diskfs's MBR and copies the filesystem into partition 1.
func assemble(path string, size int64, fsImage string) error {
	d, err := diskfs.Create(path, size, diskfs.SectorSizeDefault)
	if err != nil {
		return err
	}
	start, sectors := uint32(partitionOffset/sectorSize), uint32(size/sectorSize-partitionOffset/sectorSize)
	table := &mbr.Table{
		LogicalSectorSize:  sectorSize,
		PhysicalSectorSize: sectorSize,
		Partitions:         []*mbr.Partition{linuxPartition(start, sectors)},
	}
	if err := d.Partition(table); err != nil {
		d.Close()
		return fmt.Errorf("partition table: %w", err)
	}
	if err := d.Close(); err != nil {
		return err
	}
	return copySparse(path, partitionOffset, fsImage)
}

// linuxPartition is an MBR entry of type 0x83 with CHS fields computed for the usual 255 heads and
// 63 sectors per track (capped at 1023/254/63 beyond what CHS can address).
func linuxPartition(start, sectors uint32) *mbr.Partition {
	p := &mbr.Partition{Index: 1, Type: mbr.Linux, Start: start, Size: sectors}
	p.StartCylinder, p.StartHead, p.StartSector = chs(start)
	p.EndCylinder, p.EndHead, p.EndSector = chs(start + sectors - 1)
	return p
}

func chs(lba uint32) (cylinder, head, sector byte) {
	const heads, sectorsPerTrack = 255, 63
	c := lba / (heads * sectorsPerTrack)
	h := (lba / sectorsPerTrack) % heads
	s := lba%sectorsPerTrack + 1
	if c > 1023 {
		c, h, s = 1023, 254, 63
	}
	return byte(c), byte(h), byte(s) | byte(c>>8)<<6
}

// copySparse writes src into the file dst at offset, skipping all-zero blocks (dst is new and sparse).
func copySparse(dst string, offset int64, src string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	buf := make([]byte, 64<<10)
	zero := make([]byte, len(buf))
	for pos := offset; ; {
		n, err := io.ReadFull(in, buf)
		if n > 0 && !bytes.Equal(buf[:n], zero[:n]) {
			if _, werr := out.WriteAt(buf[:n], pos); werr != nil {
				out.Close()
				return werr
			}
		}
		pos += int64(n)
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			break
		}
		if err != nil {
			out.Close()
			return err
		}
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
