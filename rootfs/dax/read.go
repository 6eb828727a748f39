package dax

import (
	"errors"
	"fmt"
	"io"
	"math/bits"
)

// Header is a DAX header read back from an image.
type Header struct {
	Size  int64       // of the whole image: the NVDIMM namespace
	Info  *Info       // the info block at 4 KiB
	Outer []Partition // MBR #1, what a virtio-blk disk shows
	Inner []Partition // MBR #2 at dataoff, what /dev/pmem0 shows (sectors relative to dataoff)
}

// Read reads the header of an image of size bytes and checks it the way the kernel's
// nd_pfn_validate does, plus Kata's layout (dataoff 2 MiB, MBR #1 = MBR #2 moved 2 MiB). Every
// problem found is returned at once. An image without an info block gives an error wrapping
// ErrNoInfo.
func Read(r io.ReaderAt, size int64) (*Header, error) {
	block := make([]byte, InfoSize)
	if _, err := r.ReadAt(block, InfoOffset); err != nil {
		return nil, fmt.Errorf("read info block at 4 KiB: %w", err)
	}
	info, err := ParseInfo(block)
	if err != nil {
		return nil, err
	}
	h := &Header{Size: size, Info: info}
	errs := info.check(size)
	if h.Outer, err = ReadMBR(r, 0); err != nil {
		errs = append(errs, fmt.Errorf("MBR #1: %w", err))
	}
	if info.DataOff == HeaderSize {
		if h.Inner, err = ReadMBR(r, HeaderSize); err != nil {
			errs = append(errs, fmt.Errorf("MBR #2: %w", err))
		}
	}
	if h.Outer != nil && h.Inner != nil {
		errs = append(errs, checkMoved(h.Outer, h.Inner)...)
	}
	return h, errors.Join(errs...)
}

// check applies nd_pfn_validate's rules (drivers/nvdimm/pfn_devs.c) to a namespace of size bytes.
func (i *Info) check(size int64) []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if i.ParentUUID != [16]byte{} {
		bad("parent_uuid %x: QEMU's label-less NVDIMM namespace has the null uuid, so the kernel ignores this block; write zeros", i.ParentUUID)
	}
	if i.Mode != ModeRAM && i.Mode != ModePMEM {
		bad("mode %d: want %d (RAM, as Kata writes) or %d (PMEM)", i.Mode, ModeRAM, ModePMEM)
	}
	if i.DataOff != HeaderSize {
		bad("dataoff %d: Kata's layout puts the image (MBR #2) at %d (2 MiB)", i.DataOff, HeaderSize)
	}
	align := uint64(i.Align)
	if i.VersionMinor < 2 || align == 0 {
		align = 1 << (bits.Len64(i.DataOff|1) - 1) // the kernel's 1UL << ilog2(dataoff)
	}
	if i.DataOff%pageSize != 0 || i.DataOff%align != 0 {
		bad("dataoff %d is not aligned to the page size and to align %d: DAX would be disabled", i.DataOff, align)
	}
	if i.StartPad != 0 {
		bad("start_pad %d: deprecated, the dax path breaks with it; write 0", i.StartPad)
	}
	if size%Align != 0 || (size-int64(i.EndTrunc))%Align != 0 {
		bad("image size %d minus end_trunc %d is not a multiple of 2 MiB (the subsection the kernel maps): pad the image to a multiple of %d MiB",
			size, i.EndTrunc, SizeAlign/MiB)
	}
	usable := size - int64(i.StartPad) - int64(i.EndTrunc)
	if int64(i.DataOff) >= usable || align > uint64(size) {
		bad("dataoff %d and align %d do not fit the %d-byte namespace", i.DataOff, align, size)
	}
	errs = append(errs, i.checkPages(usable)...)
	return errs
}

// checkPages checks npfns and, in PMEM mode, the struct-page geometry and memmap room.
func (i *Info) checkPages(usable int64) []error {
	var errs []error
	if max := (usable - int64(i.DataOff)) / pageSize; max >= 0 && i.NPFNs > uint64(max) {
		errs = append(errs, fmt.Errorf("npfns %d exceeds the %d pages after dataoff", i.NPFNs, max))
	}
	switch {
	case i.Mode == ModeRAM && i.DataOff < 2*pageSize:
		errs = append(errs, fmt.Errorf("dataoff %d: RAM mode reserves the first 8 KiB for the info block", i.DataOff))
	case i.Mode == ModePMEM && i.VersionMinor >= 4 && (i.PageSize > pageSize || i.PageStructSize < 64):
		errs = append(errs, fmt.Errorf("page_size %d, page_struct_size %d: want at most 4096 and at least 64", i.PageSize, i.PageStructSize))
	case i.Mode == ModePMEM && i.DataOff < 2*pageSize+64*i.NPFNs:
		errs = append(errs, fmt.Errorf("PMEM mode: dataoff %d leaves no room for the %d-page memmap; use RAM mode (1)", i.DataOff, i.NPFNs))
	}
	return errs
}

// checkMoved checks that MBR #1 holds MBR #2's partitions, each 2 MiB further.
func checkMoved(outer, inner []Partition) []error {
	if len(outer) != len(inner) {
		return []error{fmt.Errorf("MBR #1 has %d partition(s), MBR #2 %d: MBR #1 must repeat MBR #2 moved by 2 MiB", len(outer), len(inner))}
	}
	var errs []error
	for k, in := range inner {
		want := in
		want.Start += HeaderSize / SectorSize
		if outer[k] != want {
			errs = append(errs, fmt.Errorf("MBR #1 entry %+v; want %+v (MBR #2's entry %d moved by 2 MiB)", outer[k], want, in.Index))
		}
	}
	return errs
}
