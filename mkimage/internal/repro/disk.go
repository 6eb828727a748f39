package repro

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/allox-os/allox/rootfs/dax"
)

// partition is one MBR primary partition, in bytes.
type partition struct {
	index       int
	start, size int64
}

// partitions reads the four primary entries of an MBR.
func partitions(mbr []byte) []partition {
	var out []partition
	for i := 0; i < 4; i++ {
		e := mbr[446+16*i : 446+16*(i+1)]
		if e[4] == 0 {
			continue
		}
		lba, n := binary.LittleEndian.Uint32(e[8:12]), binary.LittleEndian.Uint32(e[12:16])
		out = append(out, partition{index: i + 1, start: int64(lba) * 512, size: int64(n) * 512})
	}
	return out
}

// describeDisk maps the first differing offset of a disk image to its partition and, for ext4, to the
// block and the file that owns it.
func describeDisk(img string, off int64) (string, error) {
	where := fmt.Sprintf("first differing byte at offset %d (0x%x)", off, off)
	if off < 512 {
		return where + ", in the MBR", nil
	}
	head, err := readHead(img, dax.InfoOffset+dax.InfoSize)
	if err != nil {
		return "", err
	}
	if inDAX, detail := describeDAX(head, off); inDAX {
		return where + ", " + detail, nil
	}
	for _, p := range partitions(head) {
		if off < p.start || off >= p.start+p.size {
			continue
		}
		where += fmt.Sprintf(", in partition %d (starts at byte %d)", p.index, p.start)
		bs, ok, err := ext4BlockSize(img, p.start)
		if err != nil || !ok {
			return where, err
		}
		block := (off - p.start) / bs
		return where + ", " + ext4Owner(img, p.start, block), nil
	}
	return where + ", outside every partition", nil
}

// describeDAX names the part of Kata's NVDIMM DAX header (rootfs/dax) holding off, when the image has
// one: the PFN info block at 4 KiB (and its field), the padding, or MBR #2 at 2 MiB.
func describeDAX(head []byte, off int64) (bool, string) {
	if len(head) < dax.InfoOffset+dax.InfoSize || !bytes.Equal(head[dax.InfoOffset:dax.InfoOffset+16], dax.Signature[:]) {
		return false, ""
	}
	switch rel := off - dax.InfoOffset; {
	case rel >= 16 && rel < 32:
		return true, "in the NVDIMM DAX info block's uuid"
	case rel >= dax.InfoSize-8 && rel < dax.InfoSize:
		return true, "in the NVDIMM DAX info block's checksum"
	case rel >= 0 && rel < dax.InfoSize:
		return true, fmt.Sprintf("in the NVDIMM DAX info block at +%d", rel)
	case off < dax.HeaderSize:
		return true, "in the NVDIMM DAX header's padding"
	case off < dax.HeaderSize+512:
		return true, "in MBR #2 (behind the NVDIMM DAX header)"
	}
	return false, ""
}

// ext4BlockSize reads the superblock of an ext2/3/4 filesystem at byte start of img.
func ext4BlockSize(img string, start int64) (int64, bool, error) {
	f, err := os.Open(img)
	if err != nil {
		return 0, false, err
	}
	defer f.Close()
	sb := make([]byte, 1024)
	if _, err := f.ReadAt(sb, start+1024); err != nil {
		return 0, false, nil
	}
	if binary.LittleEndian.Uint16(sb[56:58]) != 0xef53 {
		return 0, false, nil
	}
	return 1024 << binary.LittleEndian.Uint32(sb[24:28]), true, nil
}

// ext4Owner asks debugfs which inode owns block and what it is called.
func ext4Owner(img string, start, block int64) string {
	fsys := fmt.Sprintf("%s?offset=%d", img, start)
	out, err := debugfs(fsys, fmt.Sprintf("icheck %d", block))
	if err != nil {
		return fmt.Sprintf("ext4 block %d (debugfs icheck: %v)", block, err)
	}
	ino := lastField(out)
	if _, err := strconv.Atoi(ino); err != nil {
		if block == 0 {
			return "ext4 block 0, the superblock"
		}
		return fmt.Sprintf("ext4 block %d, filesystem metadata owned by no file (group descriptors, bitmaps or inode table)", block)
	}
	out, err = debugfs(fsys, "ncheck "+ino)
	if err != nil {
		return fmt.Sprintf("ext4 block %d of inode %s (debugfs ncheck: %v)", block, ino, err)
	}
	name := lastField(out)
	if name == "" || name == "Pathname" {
		return fmt.Sprintf("ext4 block %d of inode %s, which no directory names", block, ino)
	}
	return fmt.Sprintf("ext4 block %d of file %s (inode %s)", block, path.Clean(name), ino)
}

// lastField returns the last tab-separated field of the last line of debugfs's answer.
func lastField(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	fields := strings.Split(lines[len(lines)-1], "\t")
	return strings.TrimSpace(fields[len(fields)-1])
}

func debugfs(fsys, request string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "debugfs", "-R", request, fsys)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%w: %s (apt-get install e2fsprogs)", err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}
