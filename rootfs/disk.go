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
	"github.com/allox-os/allox/rootfs/internal/mbrentry"
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
	// Verity adds partition 2, right after the filesystem and 1 MiB aligned, holding the dm-verity
	// hash tree of partition 1 (see FormatVerity), as Kata's measured rootfs lays it out. VeritySalt is
	// the tree's salt: fixed by the caller, derived from the image, never random.
	Verity     bool
	VeritySalt []byte
}

// Disk describes a written disk image.
type Disk struct {
	// FilesystemBytes is the size of partition 1, the ext4 filesystem.
	FilesystemBytes int64
	// Verity holds the hash tree's parameters when DiskOptions.Verity was set, nil otherwise.
	Verity *VerityParams
}

// part is one partition to assemble: the file holding its content, its offset and size in bytes.
type part struct {
	src          string
	start, bytes int64
}

const (
	mib             = 1 << 20
	sectorSize      = 512
	partitionOffset = 1 * mib // sector 2048, where Kata (and every partitioner) starts partition 1
	maxImageMiB     = 2<<20 - 1
)

var uuidRE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// WriteDisk writes an MBR disk image at path: a Linux (0x83) partition starting at 1 MiB (sector 2048)
// holding an ext4 filesystem populated from tree and spanning the rest, or, with opt.Verity, all but
// the last MiBs, which partition 2 (also 0x83, partition 1 marked bootable, as Kata's image builder
// does) fills with the filesystem's dm-verity hash tree. It needs mke2fs and debugfs (e2fsprogs) and,
// for verity, veritysetup (cryptsetup-bin), but neither root nor loop devices. The image is written
// next to path and renamed into place; the same tree and options always give the same bytes.
func WriteDisk(ctx context.Context, path string, tree *initramfs.Tree, opt DiskOptions) (*Disk, error) {
	d, err := writeDisk(ctx, path, tree, opt)
	if err != nil {
		return nil, fmt.Errorf("write disk %s: %w", path, err)
	}
	return d, nil
}

func writeDisk(ctx context.Context, path string, tree *initramfs.Tree, opt DiskOptions) (*Disk, error) {
	entries := tree.Entries()
	sizeMiB, err := checkDiskOptions(opt, entries)
	if err != nil {
		return nil, err
	}
	for _, tool := range []string{"mke2fs", "debugfs"} {
		if _, err := lookTool(tool); err != nil {
			return nil, fmt.Errorf("%s not found: apt-get install e2fsprogs", tool)
		}
	}
	work, err := os.MkdirTemp("", "allox-disk-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)

	size := int64(sizeMiB) * mib
	d := &Disk{FilesystemBytes: size - partitionOffset}
	if opt.Verity {
		d.FilesystemBytes -= verityReserve(d.FilesystemBytes)
	}
	fsImage := filepath.Join(work, "rootfs.ext4")
	if err := makeExt4(ctx, work, fsImage, d.FilesystemBytes, entries, opt); err != nil {
		return nil, err
	}
	parts := []part{{fsImage, partitionOffset, d.FilesystemBytes}}
	if opt.Verity {
		hashImage := filepath.Join(work, "rootfs.verity")
		p, err := FormatVerity(ctx, fsImage, hashImage, opt.VeritySalt)
		if err != nil {
			return nil, err
		}
		d.Verity = &p
		parts = append(parts, part{hashImage, partitionOffset + d.FilesystemBytes, size - partitionOffset - d.FilesystemBytes})
	}
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	os.Remove(tmp)
	if err := assemble(tmp, size, parts); err != nil {
		os.Remove(tmp)
		return nil, err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return nil, err
	}
	return d, nil
}

// verityReserve is the whole MiBs partition 2 needs for the hash tree of a filesystem of at most
// fsBytes: carving them off the filesystem only shrinks the tree.
func verityReserve(fsBytes int64) int64 {
	return (verityHashBytes(fsBytes) + mib - 1) / mib * mib
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
	if opt.Verity && len(opt.VeritySalt) == 0 {
		errs = append(errs, errors.New("VeritySalt is empty: derive one from the image (e.g. a sha256 of the spec); Kata's runtime refuses an empty salt"))
	}
	content := contentBytes(entries)
	need := content + content/10 + 16*mib + partitionOffset
	auto := int((content*13/10 + 64*mib + mib - 1) / mib)
	if opt.Verity {
		auto += int(verityReserve(int64(auto)*mib) / mib)
		need += verityReserve(need)
	}
	size := opt.SizeMiB
	switch {
	case size == 0:
		size = auto
	case size < 0 || size > maxImageMiB:
		errs = append(errs, fmt.Errorf("SizeMiB %d: want 0 (automatic, %d here) or up to %d (the MBR limit)", size, auto, maxImageMiB))
	case int64(size)*mib < need:
		errs = append(errs, fmt.Errorf("SizeMiB %d is too small for %d MiB of content: use at least %d, or 0 for automatic (%d)",
			size, content/mib, (need+mib-1)/mib, auto))
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

// assemble creates the disk image with go-diskfs's MBR, one Linux partition per part, and copies
// each part's content into its partition. With more than one partition the first is marked bootable,
// as parted's "set 1 boot on" does in Kata's image builder.
func assemble(path string, size int64, parts []part) error {
	d, err := diskfs.Create(path, size, diskfs.SectorSizeDefault)
	if err != nil {
		return err
	}
	table := &mbr.Table{LogicalSectorSize: sectorSize, PhysicalSectorSize: sectorSize}
	for i, p := range parts {
		e := mbrentry.New(i+1, mbr.Linux, uint32(p.start/sectorSize), uint32(p.bytes/sectorSize))
		e.Bootable = i == 0 && len(parts) > 1
		table.Partitions = append(table.Partitions, e)
	}
	if err := d.Partition(table); err != nil {
		d.Close()
		return fmt.Errorf("partition table: %w", err)
	}
	if err := d.Close(); err != nil {
		return err
	}
	for _, p := range parts {
		if err := copySparse(path, p.start, p.src); err != nil {
			return err
		}
	}
	return nil
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
