// Package dax writes and reads the 2 MiB NVDIMM header that Kata Containers puts in front of a guest
// root image so that the image boots both as an NVDIMM with DAX (/dev/pmem0p1) and as a plain
// virtio-blk disk (/dev/vda1):
//
//	0        MBR #1: the original image's partitions, each moved 2 MiB (4096 sectors) further
//	4 KiB    NVDIMM PFN info block (the kernel's struct nd_pfn_sb), data offset 2 MiB
//	2 MiB    the original image: MBR #2 and partition 1 at 1 MiB (3 MiB from the start of the file)
//
// Linux's NVDIMM driver reads the info block at 4 KiB of the namespace and exposes everything from
// dataoff on as /dev/pmem0, so it sees MBR #2; a virtio-blk disk sees MBR #1. The layout and the
// values follow drivers/nvdimm/pfn.h and pfn_devs.c; nothing random goes in (the info block's
// uuid is derived from a caller's seed).
package dax

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
)

// Sizes and offsets of the header.
const (
	MiB        = 1 << 20
	HeaderSize = 2 * MiB // everything before the original image; nd_pfn_sb.dataoff
	InfoOffset = 4096    // where the driver reads the info block (SZ_4K, namespace relative)
	InfoSize   = 4096    // sizeof(struct nd_pfn_sb)
	// Align is nd_pfn_sb.align: 2 MiB, the huge-page size fs-dax maps with and the x86_64
	// subsection size (memremap_compat_align) that the namespace's end must be aligned to.
	Align = 2 * MiB
	// SizeAlign is what Kata's image builder rounds an NVDIMM image's size up to
	// (IMAGE_SIZE_ALIGNMENT_MB=128): the x86_64 memory block size. QEMU places memory hot-plugged
	// later right after the NVDIMM, and the guest kernel rejects a hot-plugged DIMM whose start is not
	// 128 MiB aligned.
	SizeAlign = 128 * MiB
	pageSize  = 4096
)

// PFN modes (enum nd_pfn_mode in drivers/nvdimm/nd.h).
const (
	ModeNone = 0
	ModeRAM  = 1 // struct pages for the device live in system RAM: what Kata writes
	ModePMEM = 2 // struct pages live in the device, before dataoff
)

// Signature is PFN_SIG: a PFN ("fsdax") info block, NUL-padded to 16 bytes.
var Signature = [16]byte{'N', 'V', 'D', 'I', 'M', 'M', '_', 'P', 'F', 'N', '_', 'I', 'N', 'F', 'O', 0}

// Info is struct nd_pfn_sb (drivers/nvdimm/pfn.h), all fields little endian:
//
//	offset size field
//	     0   16 signature        "NVDIMM_PFN_INFO\0"
//	    16   16 uuid
//	    32   16 parent_uuid      the namespace's uuid; all zero for a label-less (io) namespace
//	    48    4 flags
//	    52    2 version_major
//	    54    2 version_minor
//	    56    8 dataoff          relative to the namespace start
//	    64    8 npfns
//	    72    4 mode             1 RAM, 2 PMEM
//	    76    4 start_pad        minor >= 1
//	    80    4 end_trunc        minor >= 1
//	    84    4 align            minor >= 2
//	    88    4 page_size        minor >= 4
//	    92    2 page_struct_size minor >= 4
//	    94 3994 padding          zero
//	  4088    8 checksum         nd_sb_checksum: fletcher64 over the block with this field zero
type Info struct {
	Signature      [16]byte
	UUID           [16]byte
	ParentUUID     [16]byte
	Flags          uint32
	VersionMajor   uint16
	VersionMinor   uint16
	DataOff        uint64
	NPFNs          uint64
	Mode           uint32
	StartPad       uint32
	EndTrunc       uint32
	Align          uint32
	PageSize       uint32
	PageStructSize uint16
	Checksum       uint64
}

// Field offsets inside the info block.
const (
	offFlags    = 48
	offMajor    = 52
	offMinor    = 54
	offDataOff  = 56
	offNPFNs    = 64
	offMode     = 72
	offStartPad = 76
	offEndTrunc = 80
	offAlign    = 84
	offPageSize = 88
	offPageStr  = 92
	offPadding  = 94
	offChecksum = InfoSize - 8
)

// Marshal encodes the block and stores its checksum (in the result and in i.Checksum).
func (i *Info) Marshal() []byte {
	b := make([]byte, InfoSize)
	le := binary.LittleEndian
	copy(b[0:16], i.Signature[:])
	copy(b[16:32], i.UUID[:])
	copy(b[32:48], i.ParentUUID[:])
	le.PutUint32(b[offFlags:], i.Flags)
	le.PutUint16(b[offMajor:], i.VersionMajor)
	le.PutUint16(b[offMinor:], i.VersionMinor)
	le.PutUint64(b[offDataOff:], i.DataOff)
	le.PutUint64(b[offNPFNs:], i.NPFNs)
	le.PutUint32(b[offMode:], i.Mode)
	le.PutUint32(b[offStartPad:], i.StartPad)
	le.PutUint32(b[offEndTrunc:], i.EndTrunc)
	le.PutUint32(b[offAlign:], i.Align)
	le.PutUint32(b[offPageSize:], i.PageSize)
	le.PutUint16(b[offPageStr:], i.PageStructSize)
	i.Checksum = Checksum(b)
	le.PutUint64(b[offChecksum:], i.Checksum)
	return b
}

// ErrNoInfo means the block at 4 KiB is not a PFN info block (wrong signature): the image has no
// DAX header.
var ErrNoInfo = errors.New("no NVDIMM PFN info block (signature \"NVDIMM_PFN_INFO\") at 4 KiB")

// ParseInfo decodes a 4096-byte info block and checks its signature, checksum and padding.
func ParseInfo(b []byte) (*Info, error) {
	if len(b) != InfoSize {
		return nil, fmt.Errorf("info block is %d bytes; want %d", len(b), InfoSize)
	}
	le := binary.LittleEndian
	i := &Info{
		Flags: le.Uint32(b[offFlags:]), VersionMajor: le.Uint16(b[offMajor:]), VersionMinor: le.Uint16(b[offMinor:]),
		DataOff: le.Uint64(b[offDataOff:]), NPFNs: le.Uint64(b[offNPFNs:]), Mode: le.Uint32(b[offMode:]),
		StartPad: le.Uint32(b[offStartPad:]), EndTrunc: le.Uint32(b[offEndTrunc:]), Align: le.Uint32(b[offAlign:]),
		PageSize: le.Uint32(b[offPageSize:]), PageStructSize: le.Uint16(b[offPageStr:]), Checksum: le.Uint64(b[offChecksum:]),
	}
	copy(i.Signature[:], b[0:16])
	copy(i.UUID[:], b[16:32])
	copy(i.ParentUUID[:], b[32:48])
	if i.Signature != Signature {
		return nil, fmt.Errorf("%w: found %q", ErrNoInfo, bytes.TrimRight(i.Signature[:], "\x00"))
	}
	if sum := Checksum(b); sum != i.Checksum {
		return nil, fmt.Errorf("info block checksum %#016x, computed %#016x: the block is corrupt; rewrite the header", i.Checksum, sum)
	}
	if i.VersionMinor >= 3 && !allZero(b[offPadding:offChecksum]) {
		return nil, fmt.Errorf("info block version 1.%d has non-zero padding: rewrite the header", i.VersionMinor)
	}
	return i, nil
}

// Checksum is the kernel's nd_sb_checksum: nd_fletcher64 over the 4 KiB block read as little-endian
// 32-bit words, with the last 8 bytes (the checksum field) counted as zero.
func Checksum(block []byte) uint64 {
	var lo uint32
	var hi uint64
	for off := 0; off+4 <= len(block); off += 4 {
		w := binary.LittleEndian.Uint32(block[off:])
		if off >= len(block)-8 {
			w = 0
		}
		lo += w
		hi += uint64(lo)
	}
	return hi<<32 | uint64(lo)
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
