package repro

import (
	"bytes"
	"debug/elf"
	"fmt"
	"strings"
)

// maxSections caps how many differing ELF sections a detail lists.
const maxSections = 8

// describeELF names the ELF section (or header table) holding file offset off, and lists the
// sections whose contents differ: when one section changes size, everything after it moves, so the
// first differing byte alone (often e_shoff in the ELF header) says little.
func describeELF(a, b string, off int64) string {
	where := fmt.Sprintf("first differing byte at offset %d (0x%x)", off, off)
	fa, err := elf.Open(a)
	if err != nil {
		return where + ", not a readable ELF file: " + err.Error()
	}
	defer fa.Close()
	where += ", " + elfLocation(fa, uint64(off))
	fb, err := elf.Open(b)
	if err != nil {
		return where
	}
	defer fb.Close()
	if diff := differingSections(fa, fb); diff != "" {
		where += "; " + diff
	}
	return where
}

func elfLocation(f *elf.File, off uint64) string {
	for _, s := range f.Sections {
		if s.Type == elf.SHT_NOBITS || s.Size == 0 {
			continue
		}
		if off >= s.Offset && off < s.Offset+s.FileSize {
			return fmt.Sprintf("in ELF section %s (+0x%x)", s.Name, off-s.Offset)
		}
	}
	for _, p := range f.Progs {
		if off >= p.Off && off < p.Off+p.Filesz {
			return fmt.Sprintf("in ELF segment %s at 0x%x, outside every section", p.Type, p.Off)
		}
	}
	return "in the ELF headers or the section header table"
}

// differingSections compares the sections of a and b by name and describes those whose contents
// differ, the first with its offset.
func differingSections(a, b *elf.File) string {
	var names []string
	first := ""
	for _, sa := range a.Sections {
		sb := b.Section(sa.Name)
		if sa.Name == "" || sa.Type == elf.SHT_NOBITS {
			continue
		}
		if sb == nil {
			names = append(names, sa.Name+" (only in the first)")
			continue
		}
		da, errA := sa.Data()
		db, errB := sb.Data()
		if errA != nil || errB != nil || bytes.Equal(da, db) {
			continue
		}
		if first == "" {
			d, _ := firstDiff(bytes.NewReader(da), bytes.NewReader(db))
			first = fmt.Sprintf("%s first differs at +0x%x (sizes %d and %d)", sa.Name, d, len(da), len(db))
		}
		names = append(names, sa.Name)
	}
	if len(names) == 0 {
		return "every section's contents are identical"
	}
	more := ""
	if len(names) > maxSections {
		more = fmt.Sprintf(" and %d more", len(names)-maxSections)
		names = names[:maxSections]
	}
	return fmt.Sprintf("differing sections: %s%s; %s", strings.Join(names, ", "), more, first)
}
