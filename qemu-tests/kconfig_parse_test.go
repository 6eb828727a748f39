package qemutests

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestMissingRequests(t *testing.T) {
	live, err := liveConfig(`#
# Automatically generated file; DO NOT EDIT.
CONFIG_64BIT=y
CONFIG_NR_CPUS=64
CONFIG_LOCALVERSION="-allox"
# CONFIG_MODULES is not set
CONFIG_BTRFS_FS=m
CONFIG_PVH=y
# CONFIG_PVH is not set
`)
	if err != nil {
		t.Fatal(err)
	}
	reqs := []kconfigRequest{
		{"CONFIG_64BIT", "y", "a:1"},
		{"CONFIG_NR_CPUS", "64", "a:2"},
		{"CONFIG_LOCALVERSION", `"-allox"`, "a:3"},
		{"CONFIG_MODULES", "n", "a:4"},
		{"CONFIG_ND_BLK", "n", "a:5"},
		{"CONFIG_BTRFS_FS", "y", "a:6"},
		{"CONFIG_VIRTIO_FS", "y", "a:7"},
		{"CONFIG_PVH", "y", "a:8"},
		{"CONFIG_64BIT", "n", "a:9"},
	}
	want := []string{
		"CONFIG_BTRFS_FS=y (a:6): running kernel has m",
		"CONFIG_VIRTIO_FS=y (a:7): absent from the running kernel",
		"CONFIG_PVH=y (a:8): running kernel has n",
		"CONFIG_64BIT=n (a:9): running kernel has y",
	}
	if diff := cmp.Diff(want, missingRequests(reqs, live)); diff != "" {
		t.Errorf("missingRequests (-want +got):\n%s", diff)
	}
}

func TestReadFragments(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("10-a.conf", "# comment\n\nCONFIG_A=y\n# CONFIG_B is not set\n")
	write("20-b.conf", "CONFIG_C=\"x y\"\nCONFIG_A=y\n")
	write("README", "not a fragment")
	got, err := readFragments(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []kconfigRequest{
		{"CONFIG_A", "y", "10-a.conf:3"}, {"CONFIG_B", "n", "10-a.conf:4"},
		{"CONFIG_C", `"x y"`, "20-b.conf:1"}, {"CONFIG_A", "y", "20-b.conf:2"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("readFragments (-want +got):\n%s", diff)
	}
	write("30-c.conf", "CONFIG_A=n\n")
	if _, err := readFragments(dir); err == nil || !strings.Contains(err.Error(), "CONFIG_A=y (20-b.conf:2) vs n (30-c.conf:1)") {
		t.Errorf("conflict: %v", err)
	}
	write("40-bad.conf", "CONFIG_A y\n")
	if _, err := readFragments(dir); err == nil || !strings.Contains(err.Error(), "40-bad.conf: line 1") {
		t.Errorf("malformed: %v", err)
	}
}

// TestRepositoryFragmentsParse keeps the real fragments readable by this parser.
func TestRepositoryFragmentsParse(t *testing.T) {
	reqs, err := readFragments(filepath.Join("..", "kernel", "fragments"))
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) < 50 {
		t.Errorf("only %d requests in kernel/fragments", len(reqs))
	}
}

func FuzzParseKconfig(f *testing.F) {
	f.Add("CONFIG_A=y\n# CONFIG_B is not set\n")
	f.Add("CONFIG_S=\"a b\"\n#\n\nCONFIG_N=0x10\n")
	f.Fuzz(func(t *testing.T, text string) {
		lines, err := parseKconfig(strings.NewReader(text))
		if err != nil {
			return
		}
		// Writing what was read and reading it again gives the same assignments.
		var b strings.Builder
		for _, l := range lines {
			if l.Value == "n" {
				fmt.Fprintf(&b, "# %s is not set\n", l.Symbol)
			} else {
				fmt.Fprintf(&b, "%s=%s\n", l.Symbol, l.Value)
			}
		}
		again, err := parseKconfig(strings.NewReader(b.String()))
		if err != nil {
			t.Fatalf("reparse: %v\n%s", err, b.String())
		}
		if len(again) != len(lines) {
			t.Fatalf("reparse gave %d lines, want %d", len(again), len(lines))
		}
		for i := range lines {
			if lines[i].Symbol != again[i].Symbol || lines[i].Value != again[i].Value {
				t.Fatalf("line %d: %+v became %+v", i, lines[i], again[i])
			}
		}
	})
}
