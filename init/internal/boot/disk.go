package boot

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// Content is what a store disk holds, as far as init is concerned.
type Content int

const (
	Blank Content = iota // no Btrfs superblock, first and last MiB all zero: safe to format
	Btrfs                // a Btrfs superblock: mount it
	Other                // anything else: never formatted
)

const (
	btrfsMagic    = "_BHRfS_M"
	btrfsMagicOff = 0x10040
	probeLen      = 1 << 20
	virtioIDBytes = 20 // VIRTIO_BLK_ID_BYTES: QEMU cuts longer serials
)

// Probe is the result of looking at a disk.
type Probe struct {
	Content Content
	Size    int64
	Looks   string // for Other: a guess such as "an ext4 filesystem"
}

var errNoDisk = errors.New("no disk with that serial")

// FindDisk returns the /dev path of the virtio disk whose serial (/sys/block/vd*/serial) is serial.
func FindDisk(sys *Sys, serial string) (string, error) {
	want := serial
	if len(want) > virtioIDBytes {
		want = want[:virtioIDBytes]
	}
	files, err := filepath.Glob(sys.Path("/sys/block/vd*/serial"))
	if err != nil {
		return "", fmt.Errorf("BUG: serial glob: %w", err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // a disk going away while we look is not our disk
		}
		if strings.TrimRight(string(b), " \t\r\n\x00") == want {
			return "/dev/" + filepath.Base(filepath.Dir(f)), nil
		}
	}
	return "", fmt.Errorf("%w %q among %d virtio disks", errNoDisk, serial, len(files))
}

// ProbeFile classifies the disk (or image file) at path.
func ProbeFile(path string) (Probe, error) {
	f, err := os.Open(path)
	if err != nil {
		return Probe{}, err
	}
	defer f.Close()
	size, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return Probe{}, err
	}
	return Classify(f, size)
}

// Classify looks for the Btrfs magic and, failing that, checks that the first and the last MiB
// are zero (partition tables and RAID metadata also live at the end of a disk). A Btrfs disk,
// every boot but the first, is read only up to its magic.
func Classify(r io.ReaderAt, size int64) (Probe, error) {
	head, err := readAt(r, 0, min(size, int64(btrfsMagicOff+len(btrfsMagic))))
	if err != nil {
		return Probe{}, err
	}
	p := Probe{Size: size}
	if len(head) >= btrfsMagicOff+len(btrfsMagic) &&
		string(head[btrfsMagicOff:btrfsMagicOff+len(btrfsMagic)]) == btrfsMagic {
		p.Content = Btrfs
		return p, nil
	}
	rest, err := readAt(r, int64(len(head)), min(size, probeLen)-int64(len(head)))
	if err != nil {
		return Probe{}, err
	}
	head = append(head, rest...)
	tailOff := max(size-probeLen, 0)
	tail, err := readAt(r, tailOff, size-tailOff)
	if err != nil {
		return Probe{}, err
	}
	if allZero(head) && allZero(tail) {
		return p, nil
	}
	p.Content, p.Looks = Other, guess(head)
	return p, nil
}

func readAt(r io.ReaderAt, off, n int64) ([]byte, error) {
	b := make([]byte, n)
	if _, err := r.ReadAt(b, off); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("read %d bytes at %d: %w", n, off, err)
	}
	return b, nil
}

// zeros is what allZero compares against: bytes.Equal runs word- and vector-wide, where a loop
// over single bytes costs millions of emulated instructions for the 2 MiB of a blank disk under
// TCG.
var zeros [64 << 10]byte

func allZero(b []byte) bool {
	for len(b) > 0 {
		n := min(len(b), len(zeros))
		if !bytes.Equal(b[:n], zeros[:n]) {
			return false
		}
		b = b[n:]
	}
	return true
}

var signatures = []struct {
	off  int
	sig  string
	what string
}{
	{0x438, "\x53\xef", "an ext2/3/4 filesystem"},
	{0, "XFSB", "an XFS filesystem"},
	{0, "LUKS\xba\xbe", "a LUKS volume"},
	{0, "hsqs", "a squashfs image"},
	{0x400, "\xe2\xe1\xf5\xe0", "an EROFS image"},
	{0x200, "EFI PART", "a GPT partition table"},
	{0xff6, "SWAPSPACE2", "swap space"},
	{0x1fe, "\x55\xaa", "an MBR partition table"},
}

func guess(head []byte) string {
	for _, s := range signatures {
		if len(head) >= s.off+len(s.sig) && bytes.Equal(head[s.off:s.off+len(s.sig)], []byte(s.sig)) {
			return s.what
		}
	}
	return "data of an unknown kind"
}
