package dax

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/allox-os/allox/initramfs"
	"github.com/allox-os/allox/rootfs"
)

// testImage writes a real 40 MiB MBR + ext4 disk with rootfs.WriteDisk (mke2fs, debugfs).
func testImage(t *testing.T) string {
	t.Helper()
	for _, tool := range []string{"mke2fs", "debugfs", "e2fsck", "sfdisk"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not found: apt-get install e2fsprogs fdisk", tool)
		}
	}
	tree := &initramfs.Tree{}
	must(t, tree.AddFile("/sbin/init", 0o755, []byte("#!/bin/sh\n")))
	must(t, tree.AddFile("/etc/resolv.conf", 0o644, nil))
	path := filepath.Join(t.TempDir(), "rootfs.img")
	opt := rootfs.DiskOptions{SizeMiB: 40, Label: "dax-test", UUID: "7c2a6e0e-3f7b-4d0a-9c51-2b1f0e6d4a10",
		HashSeed: "0b7f3c9e-8d21-4a46-b0e3-5f9d2c7a1e84", Mtime: time.Unix(1700000000, 0)}
	if _, err := rootfs.WriteDisk(context.Background(), path, tree, opt); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestAddHeaderRoundTrip(t *testing.T) {
	path := testImage(t)
	orig, err := os.ReadFile(path)
	must(t, err)
	must(t, AddHeader(path, Options{Seed: []byte("spec")}))
	got, err := os.ReadFile(path)
	must(t, err)
	if len(got) != 128*MiB {
		t.Fatalf("wrapped size %d; want 128 MiB (2 MiB header + 40 MiB, rounded up to 128 MiB)", len(got))
	}
	if !bytes.Equal(got[HeaderSize:HeaderSize+len(orig)], orig) {
		t.Error("the original image is not intact at 2 MiB")
	}
	if !allZero(got[HeaderSize+len(orig):]) {
		t.Error("the padding after the image is not zero")
	}
	h, err := Read(bytes.NewReader(got), int64(len(got)))
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	want := []Partition{{Index: 1, Type: 0x83, Start: 2048, Sectors: (40 - 1) * MiB / SectorSize}}
	if len(h.Inner) != 1 || h.Inner[0] != want[0] {
		t.Errorf("MBR #2 %+v; want %+v", h.Inner, want)
	}
	want[0].Start = 3 * MiB / SectorSize
	if len(h.Outer) != 1 || h.Outer[0] != want[0] {
		t.Errorf("MBR #1 %+v; want %+v", h.Outer, want)
	}
	if h.Info.UUID != uuidFrom([]byte("spec")) || h.Info.NPFNs != (128-2)*MiB/4096 {
		t.Errorf("info %+v: uuid or npfns not as derived", h.Info)
	}
	checkWithTools(t, path)
	if err := AddHeader(path, Options{Seed: []byte("spec")}); err == nil || !strings.Contains(err.Error(), "already has a DAX header") {
		t.Errorf("second AddHeader: %v; want a refusal naming the existing header", err)
	}
}

// checkWithTools reads both views with the reference tools: sfdisk sees partition 1 at 3 MiB, and
// e2fsck finds a clean ext4 there.
func checkWithTools(t *testing.T, path string) {
	t.Helper()
	out, err := exec.Command("sfdisk", "-d", path).CombinedOutput()
	if err != nil {
		t.Fatalf("sfdisk -d: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "start=        6144") || !strings.Contains(string(out), "type=83") {
		t.Errorf("sfdisk -d of the wrapped image: want partition 1 at sector 6144 (3 MiB), type 83:\n%s", out)
	}
	fs := path + "?offset=" + strconv.Itoa(3*MiB)
	if out, err := exec.Command("e2fsck", "-fn", fs).CombinedOutput(); err != nil {
		t.Errorf("e2fsck -fn %s: %v\n%s", fs, err, out)
	}
}

func TestAddHeaderDeterministic(t *testing.T) {
	path := testImage(t)
	a, b := filepath.Join(t.TempDir(), "a.img"), filepath.Join(t.TempDir(), "b.img")
	must(t, WrapFile(a, path, Options{Seed: []byte("same")}))
	must(t, WrapFile(b, path, Options{Seed: []byte("same")}))
	ab, err := os.ReadFile(a)
	must(t, err)
	bb, err := os.ReadFile(b)
	must(t, err)
	if !bytes.Equal(ab, bb) {
		t.Error("two wraps of the same image with the same seed differ")
	}
	c := filepath.Join(t.TempDir(), "c.img")
	must(t, WrapFile(c, path, Options{Seed: []byte("other"), SizeAlign: Align}))
	cb, err := os.ReadFile(c)
	must(t, err)
	if bytes.Equal(ab[InfoOffset+16:InfoOffset+32], cb[InfoOffset+16:InfoOffset+32]) {
		t.Error("a different seed gave the same uuid")
	}
	if len(cb) != 42*MiB {
		t.Errorf("SizeAlign 2 MiB: size %d; want 42 MiB", len(cb))
	}
}

func TestWrapRefuses(t *testing.T) {
	path := testImage(t)
	dst := filepath.Join(t.TempDir(), "x.img")
	for _, tt := range []struct {
		name string
		opt  Options
		want string
	}{
		{"no seed", Options{}, "Seed is empty"},
		{"odd alignment", Options{Seed: []byte("s"), SizeAlign: 3 * MiB}, "multiple of 2097152"},
	} {
		if err := WrapFile(dst, path, tt.opt); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v; want an error containing %q", tt.name, err, tt.want)
		}
	}
	blank := filepath.Join(t.TempDir(), "blank.img")
	must(t, os.WriteFile(blank, make([]byte, MiB), 0o644))
	if err := WrapFile(dst, blank, Options{Seed: []byte("s")}); err == nil || !strings.Contains(err.Error(), "MBR") {
		t.Errorf("image without an MBR: %v; want an error naming the MBR", err)
	}
}

func TestReadFindsBrokenHeader(t *testing.T) {
	path := testImage(t)
	must(t, AddHeader(path, Options{Seed: []byte("s")}))
	img, err := os.ReadFile(path)
	must(t, err)
	for _, tt := range []struct {
		name string
		info func(i *Info)
		size int64
		want string
	}{
		{"parent uuid", func(i *Info) { i.ParentUUID[0] = 1 }, 0, "parent_uuid"},
		{"mode", func(i *Info) { i.Mode = 7 }, 0, "mode 7"},
		{"dataoff", func(i *Info) { i.DataOff = 4 * MiB }, 0, "dataoff"},
		{"size", func(i *Info) {}, int64(len(img)) - MiB, "not a multiple of 2 MiB"},
	} {
		b := bytes.Clone(img)
		i, err := ParseInfo(b[InfoOffset : InfoOffset+InfoSize])
		must(t, err)
		tt.info(i)
		copy(b[InfoOffset:], i.Marshal())
		size := int64(len(b))
		if tt.size != 0 {
			size = tt.size
		}
		if _, err := Read(bytes.NewReader(b), size); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: Read: %v; want an error containing %q", tt.name, err, tt.want)
		}
	}
	b := bytes.Clone(img)
	b[446+8] ^= 1 // MBR #1's start sector
	if _, err := Read(bytes.NewReader(b), int64(len(b))); err == nil || !strings.Contains(err.Error(), "MBR #1 entry") {
		t.Errorf("moved MBR #1: %v; want an error naming MBR #1", err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
