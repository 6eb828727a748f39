package kataagent

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"strings"

	diskfs "github.com/diskfs/go-diskfs"
	"github.com/diskfs/go-diskfs/filesystem/ext4"
)

const mib = 1 << 20

// daxHeaderBytes is Kata's NVDIMM DAX header: with it, MBR #1 puts partition 1 at 3 MiB.
const daxHeaderBytes = 2 * mib

// fromDisk reads partition 1 of an MBR disk image (Kata's kata-containers.img) with go-diskfs.
func fromDisk(image, dst string) (Found, error) {
	d, err := diskfs.Open(image, diskfs.WithOpenMode(diskfs.ReadOnly))
	if err != nil {
		return Found{}, err
	}
	defer d.Close()
	p, err := d.GetPartition(1)
	if err != nil {
		return Found{}, fmt.Errorf("partition 1: %w", err)
	}
	start, size := p.GetStart(), p.GetSize()
	format := fmt.Sprintf("MBR disk image, partition 1 at %d MiB", start/mib)
	if start >= daxHeaderBytes+mib {
		format += " (behind the NVDIMM DAX header)"
	}
	sb := make([]byte, 2048)
	if _, err := d.Backend.ReadAt(sb, start); err != nil {
		return Found{}, fmt.Errorf("partition 1 superblock: %w", err)
	}
	switch {
	case binary.LittleEndian.Uint16(sb[1024+56:]) == 0xef53:
	case binary.LittleEndian.Uint32(sb[1024:]) == 0xe0f5e1e2:
		return Found{}, fmt.Errorf("%s holds erofs, which mkimage cannot read: take the agent out with "+
			"`fsck.erofs --extract=DIR` (erofs-utils) on the partition and pass it as binary = \"DIR/usr/bin/kata-agent\"", format)
	case bytes.Equal(sb[:4], []byte("XFSB")):
		return Found{}, fmt.Errorf("%s holds xfs, which mkimage cannot read: copy the agent out and pass it as binary", format)
	default:
		return Found{}, fmt.Errorf("%s holds no ext4 filesystem", format)
	}
	fsys, err := ext4.Read(d.Backend, size, start, 512)
	if err != nil {
		return Found{}, fmt.Errorf("%s: ext4: %w", format, err)
	}
	final, e, err := resolve(diskTree{fsys, 1024 << binary.LittleEndian.Uint32(sb[1024+24:])}, Path)
	if err != nil {
		return Found{}, err
	}
	format += ", ext4"
	if e.sparse {
		// go-diskfs v1.9.4 reads the blocks after a hole from the wrong place: e2fsprogs' debugfs
		// reads the file instead (mkfs.ext4 -d leaves a hole for every all-zero block).
		return Found{Format: format + " (a sparse file, read with debugfs)", Path: final}, dumpSparse(image, start, final, dst)
	}
	f, err := fsys.OpenFile(strings.TrimPrefix(final, "/"), 0)
	if err != nil {
		return Found{}, fmt.Errorf("%s: open %s: %w", format, final, err)
	}
	defer f.Close()
	return Found{Format: format, Path: final}, writeAgent(dst, f)
}

// dumpSparse copies a file with holes out of the ext4 filesystem at offset in image with debugfs,
// which opens "IMAGE?offset=N" read-only.
func dumpSparse(image string, offset int64, p, dst string) error {
	if _, err := exec.LookPath("debugfs"); err != nil {
		return fmt.Errorf("%s is a sparse file, which needs debugfs to be read: apt-get install e2fsprogs", p)
	}
	os.Remove(dst)
	cmd := exec.Command("debugfs", "-R", fmt.Sprintf("dump %q %q", p, dst), fmt.Sprintf("%s?offset=%d", image, offset))
	out, err := cmd.CombinedOutput()
	if err == nil {
		if _, err = os.Stat(dst); err != nil {
			err = fmt.Errorf("no output: %s", bytes.TrimSpace(out))
		}
	}
	if err != nil {
		return fmt.Errorf("debugfs dump %s: %w", p, err)
	}
	return os.Chmod(dst, 0o755)
}

type diskEntry struct {
	mode   fs.FileMode
	link   string
	sparse bool // a regular file with fewer blocks than its size needs: it has holes
}

// diskTree looks paths up in an ext4 filesystem without following a final symlink. go-diskfs
// takes io/fs paths: no leading slash.
type diskTree struct {
	fs        *ext4.FileSystem
	blockSize int64
}

func (t diskTree) lstat(p string) (diskEntry, error) {
	rel := strings.TrimPrefix(p, "/")
	if rel == "" {
		return diskEntry{mode: fs.ModeDir | 0o755}, nil
	}
	fi, err := t.fs.Stat(rel)
	if err != nil {
		if strings.Contains(err.Error(), "does not exist") || strings.Contains(err.Error(), "could not read directory entries") {
			return diskEntry{}, fmt.Errorf("%s: %w", p, fs.ErrNotExist)
		}
		return diskEntry{}, err
	}
	e := diskEntry{mode: fi.Mode()}
	if st, ok := fi.Sys().(*ext4.StatT); ok && fi.Mode().IsRegular() {
		e.sparse = int64(st.Blocks)*512 < (fi.Size()+t.blockSize-1)/t.blockSize*t.blockSize
	}
	if fi.IsDir() {
		e.mode |= fs.ModeDir
	}
	if e.mode&fs.ModeSymlink != 0 {
		if e.link, err = t.fs.ReadLink(rel); err != nil {
			return diskEntry{}, fmt.Errorf("readlink %s: %w", p, err)
		}
	}
	return e, nil
}
