package limit

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		err  string
	}{
		{"0", 0, ""},
		{"1048576", 1 << 20, ""},
		{"512MiB", 512 << 20, ""},
		{"4GiB", 4 << 30, ""},
		{"4 GiB", 4 << 30, ""},
		{"1TiB", 1 << 40, ""},
		{"64KiB", 64 << 10, ""},
		{"100B", 100, ""},
		{"4GB", 0, "KiB, MiB, GiB or TiB"},
		{"1.5GiB", 0, "whole number"},
		{"-1", 0, "a size is"},
		{"", 0, "a size is"},
		{"9999999TiB", 0, "overflows"},
	} {
		got, err := ParseSize(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseSize(%q) = %d, %v; want error containing %q", tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
	for n, want := range map[int64]string{0: "0", 4 << 30: "4GiB", 1536 << 20: "1536MiB", 1000: "1000", 3 << 10: "3KiB"} {
		if got := FormatSize(n); got != want {
			t.Errorf("FormatSize(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestParseAndString(t *testing.T) {
	s, err := Parse("pids_max=1024, memory_max=2GiB,memory_swap_max=0,cpu_weight=100")
	if err != nil {
		t.Fatal(err)
	}
	want := Set{PidsMax: 1024, MemoryMax: 2 << 30, MemorySwapMax: Int64(0), CPUWeight: 100}
	if diff := cmp.Diff(want, s); diff != "" {
		t.Errorf("Parse (-want +got):\n%s", diff)
	}
	if got := s.String(); got != "pids_max=1024,memory_max=2147483648,memory_swap_max=0,cpu_weight=100" {
		t.Errorf("String = %q", got)
	}
	if back, err := Parse(s.String()); err != nil || !cmp.Equal(back, s) {
		t.Errorf("round trip: %+v, %v", back, err)
	}
	if s, err := Parse(""); err != nil || !s.IsZero() {
		t.Errorf("Parse(\"\") = %+v, %v", s, err)
	}
	for in, msg := range map[string]string{
		"pids=5":                `unknown limit "pids": use pids_max, memory_max, memory_swap_max, cpu_weight`,
		"pids_max":              "is not name=value",
		"pids_max=1,pids_max=2": "given twice",
		"memory_max=lots":       "a size is",
		"cpu_weight=0":          "leave cpu_weight out",
		"pids_max=1e3":          "invalid syntax",
		"memory_swap_max=0,x=1": "unknown limit",
	} {
		if _, err := Parse(in); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("Parse(%q) error = %v, want %q", in, err, msg)
		}
	}
}

func TestCheckAndWithin(t *testing.T) {
	bad := Set{PidsMax: 3, MemoryMax: 1 << 20, MemorySwapMax: Int64(-1), CPUWeight: 20000}
	var fields []string
	for _, e := range bad.Check() {
		fields = append(fields, e.Field)
	}
	if diff := cmp.Diff(Fields, fields); diff != "" {
		t.Errorf("Check fields (-want +got):\n%s", diff)
	}
	if errs := (Set{PidsMax: 16, MemoryMax: 16 << 20, MemorySwapMax: Int64(0), CPUWeight: 1}).Check(); len(errs) != 0 {
		t.Errorf("minimums refused: %v", errs)
	}
	max := Set{PidsMax: 100, MemoryMax: 1 << 30}
	errs := Set{PidsMax: 101, MemoryMax: 2 << 30, CPUWeight: 9000}.Within(max)
	if len(errs) != 2 || errs[1].Field != MemoryMax || errs[1].Error() != "memory_max: 2GiB exceeds the maximum 1GiB" {
		t.Errorf("Within = %v", errs)
	}
}

func TestMergeAndCap(t *testing.T) {
	session := Merge(Set{PidsMax: 4096, MemoryMax: 4 << 30, MemorySwapMax: Int64(0), CPUWeight: 100},
		Set{MemoryMax: 1 << 30, CPUWeight: 500})
	if diff := cmp.Diff(Set{PidsMax: 4096, MemoryMax: 1 << 30, MemorySwapMax: Int64(0), CPUWeight: 500}, session); diff != "" {
		t.Errorf("Merge (-want +got):\n%s", diff)
	}
	run := Cap(Set{PidsMax: 1024, MemoryMax: 2 << 30, CPUWeight: 100}, session)
	if diff := cmp.Diff(Set{PidsMax: 1024, MemoryMax: 1 << 30, MemorySwapMax: Int64(0), CPUWeight: 100}, run); diff != "" {
		t.Errorf("Cap (-want +got):\n%s", diff)
	}
	if got := Cap(Set{PidsMax: 1024}, Set{}); !cmp.Equal(got, Set{PidsMax: 1024}) {
		t.Errorf("Cap by nothing = %+v", got)
	}
}
