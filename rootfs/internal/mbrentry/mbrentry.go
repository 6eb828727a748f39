// Package mbrentry builds the MBR partition entries of Allox's disk images (the image itself and
// the NVDIMM DAX header's first table), with CHS fields filled in the usual way.
package mbrentry

import "github.com/diskfs/go-diskfs/partition/mbr"

// New is partition index of type typ covering sectors from start, its CHS fields computed for 255
// heads and 63 sectors per track (capped at 1023/254/63 beyond what CHS can address).
func New(index int, typ mbr.Type, start, sectors uint32) *mbr.Partition {
	p := &mbr.Partition{Index: index, Type: typ, Start: start, Size: sectors}
	p.StartCylinder, p.StartHead, p.StartSector = CHS(start)
	p.EndCylinder, p.EndHead, p.EndSector = CHS(start + sectors - 1)
	return p
}

// CHS is the cylinder/head/sector address of lba as an MBR entry stores it.
func CHS(lba uint32) (cylinder, head, sector byte) {
	const heads, sectorsPerTrack = 255, 63
	c := lba / (heads * sectorsPerTrack)
	h := (lba / sectorsPerTrack) % heads
	s := lba%sectorsPerTrack + 1
	if c > 1023 {
		c, h, s = 1023, 254, 63
	}
	return byte(c), byte(h), byte(s) | byte(c>>8)<<6
}
