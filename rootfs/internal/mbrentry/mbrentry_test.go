package mbrentry

import "testing"

func TestCHS(t *testing.T) {
	for _, tc := range []struct {
		lba     uint32
		c, h, s byte
	}{{2048, 0, 32, 33}, {0, 0, 0, 1}, {16450559, 0xff, 254, 0xff}, {1 << 30, 0xff, 254, 0xff}, {16065 * 256, 0, 0, 1 | 1<<6}} {
		if c, h, s := CHS(tc.lba); c != tc.c || h != tc.h || s != tc.s {
			t.Errorf("chs(%d) = %d/%d/%d, want %d/%d/%d", tc.lba, c, h, s, tc.c, tc.h, tc.s)
		}
	}
}
