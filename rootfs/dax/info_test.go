package dax

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// referenceChecksum is nd_sb_checksum written from the kernel's description, independently of
// Checksum: copy the block, zero the trailing __le64 checksum, then Fletcher-64 over little-endian
// 32-bit words with a 32-bit low sum (taken modulo 2^32) and a 64-bit high sum of the low sums.
func referenceChecksum(block []byte) uint64 {
	b := bytes.Clone(block)
	clear(b[len(b)-8:])
	var lo, hi uint64
	for i := 0; i < len(b)/4; i++ {
		lo = (lo + uint64(binary.LittleEndian.Uint32(b[4*i:]))) % (1 << 32)
		hi += lo
	}
	return (hi << 32) | lo
}

func TestChecksumKnownValue(t *testing.T) {
	// Every word 1 except the checksum's two: lo = 1022, hi = 1+2+...+1022 + 2×1022.
	b := make([]byte, InfoSize)
	for i := 0; i < InfoSize/4-2; i++ {
		binary.LittleEndian.PutUint32(b[4*i:], 1)
	}
	binary.LittleEndian.PutUint64(b[InfoSize-8:], 0xdeadbeef) // must not count
	const want = uint64(1022*1023/2+2*1022)<<32 | 1022
	if got := Checksum(b); got != want {
		t.Errorf("Checksum = %#x; want %#x", got, want)
	}
	if got := referenceChecksum(b); got != want {
		t.Errorf("referenceChecksum = %#x; want %#x", got, want)
	}
}

func TestChecksumMatchesReference(t *testing.T) {
	b := NewInfo(uuidFrom([]byte("seed")), 128*MiB).Marshal()
	if got, want := binary.LittleEndian.Uint64(b[InfoSize-8:]), referenceChecksum(b); got != want {
		t.Errorf("stored checksum %#x; the kernel's algorithm gives %#x", got, want)
	}
	// Large words make both sums wrap.
	for i := range b[:InfoSize-8] {
		b[i] = 0xff
	}
	if got, want := Checksum(b), referenceChecksum(b); got != want {
		t.Errorf("all-ones block: Checksum %#x; reference %#x", got, want)
	}
}

// TestMarshalLayout checks the byte offsets of struct nd_pfn_sb (drivers/nvdimm/pfn.h).
func TestMarshalLayout(t *testing.T) {
	i := NewInfo([16]byte{0: 0xaa, 15: 0xbb}, 128*MiB)
	b := i.Marshal()
	le := binary.LittleEndian
	checks := []struct {
		name      string
		got, want uint64
	}{
		{"uuid[0] at 16", uint64(b[16]), 0xaa},
		{"uuid[15] at 31", uint64(b[31]), 0xbb},
		{"parent_uuid zero at 32", le.Uint64(b[32:]) | le.Uint64(b[40:]), 0},
		{"flags at 48", uint64(le.Uint32(b[48:])), 0},
		{"version_major at 52", uint64(le.Uint16(b[52:])), 1},
		{"version_minor at 54", uint64(le.Uint16(b[54:])), 4},
		{"dataoff at 56", le.Uint64(b[56:]), 2 << 20},
		{"npfns at 64", le.Uint64(b[64:]), (128 - 2) << 20 / 4096},
		{"mode at 72", uint64(le.Uint32(b[72:])), ModeRAM},
		{"start_pad at 76", uint64(le.Uint32(b[76:])), 0},
		{"end_trunc at 80", uint64(le.Uint32(b[80:])), 0},
		{"align at 84", uint64(le.Uint32(b[84:])), 2 << 20},
		{"page_size at 88", uint64(le.Uint32(b[88:])), 4096},
		{"page_struct_size at 92", uint64(le.Uint16(b[92:])), 64},
		{"checksum at 4088", le.Uint64(b[4088:]), i.Checksum},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s: %#x; want %#x", c.name, c.got, c.want)
		}
	}
	if string(b[:16]) != "NVDIMM_PFN_INFO\x00" {
		t.Errorf("signature %q", b[:16])
	}
	if !allZero(b[94:4088]) {
		t.Error("padding (94..4088) is not zero")
	}
	back, err := ParseInfo(b)
	if err != nil {
		t.Fatal(err)
	}
	if *back != *i {
		t.Errorf("ParseInfo(Marshal(i)) = %+v; want %+v", back, i)
	}
}

func TestParseInfoRejects(t *testing.T) {
	good := NewInfo(uuidFrom([]byte("x")), 128*MiB).Marshal()
	tests := []struct {
		name string
		edit func(b []byte)
		want string
	}{
		{"no signature", func(b []byte) { copy(b, "NVDIMM_BTT_INFO\x00") }, "no NVDIMM PFN info block"},
		{"flipped bit", func(b []byte) { b[100] ^= 1 }, "checksum"},
		{"short", nil, "want 4096"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := bytes.Clone(good)
			if tt.edit != nil {
				tt.edit(b)
			} else {
				b = b[:100]
			}
			_, err := ParseInfo(b)
			if err == nil || !bytes.Contains([]byte(err.Error()), []byte(tt.want)) {
				t.Errorf("ParseInfo: %v; want an error containing %q", err, tt.want)
			}
		})
	}
}

func FuzzParseInfo(f *testing.F) {
	f.Add(NewInfo(uuidFrom([]byte("a")), 128*MiB).Marshal())
	f.Add(make([]byte, InfoSize))
	f.Add([]byte("NVDIMM_PFN_INFO\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		i, err := ParseInfo(b)
		if err != nil {
			return
		}
		// A block that parses re-encodes to the same bytes, checksum included.
		if again := i.Marshal(); i.VersionMinor >= 3 && !bytes.Equal(again, b) {
			t.Fatalf("Marshal(ParseInfo(b)) differs from b")
		}
		_ = i.check(int64(len(b)) * 1024)
	})
}

func FuzzRead(f *testing.F) {
	img := make([]byte, 3*MiB)
	copy(img[InfoOffset:], NewInfo(uuidFrom([]byte("a")), int64(len(img))).Marshal())
	img[510], img[511] = 0x55, 0xaa
	f.Add(img[:InfoOffset+InfoSize], int64(len(img)))
	f.Fuzz(func(t *testing.T, b []byte, size int64) {
		h, err := Read(bytes.NewReader(b), size)
		if err == nil && (h == nil || h.Info == nil) {
			t.Fatal("Read returned no header and no error")
		}
	})
}
