package rootfs

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var testSalt = func() []byte { h := sha256.Sum256([]byte("allox verity salt\ntest")); return h[:] }()

func verityOptions() DiskOptions {
	opt := testOptions
	opt.Verity, opt.VeritySalt = true, testSalt
	return opt
}

// TestWriteDiskVerity writes a verity disk and checks it with the reference tools: sfdisk sees p1
// (ext4, bootable) at 1 MiB and p2 right after it up to the end, both 0x83 as parted makes them in
// Kata's builder; e2fsck accepts p1; veritysetup verifies p1 against the tree in p2 with the returned
// root hash and salt, and refuses p1 once one byte of it changes.
func TestWriteDiskVerity(t *testing.T) {
	img := filepath.Join(t.TempDir(), "rootfs.img")
	start := time.Now()
	d, err := WriteDisk(context.Background(), img, diskTree(t, false), verityOptions())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("verity disk in %v: %+v", time.Since(start).Round(time.Millisecond), *d.Verity)
	fi, err := os.Stat(img)
	must(t, err)
	plain := int64(contentBytes(diskTree(t, false).Entries())*13/10+64*mib+mib-1) / mib * mib
	hashMiB := (fi.Size() - plain) / mib
	if hashMiB != 1 || d.FilesystemBytes != plain-partitionOffset {
		t.Errorf("image %d MiB with a %d MiB filesystem: want the automatic %d MiB plus 1 MiB for the hash tree",
			fi.Size()/mib, d.FilesystemBytes/mib, plain/mib)
	}
	p1Sectors, p2Start := d.FilesystemBytes/512, (partitionOffset+d.FilesystemBytes)/512
	want := fmt.Sprintf("label: dos\nlabel-id: 0x00000000\ndevice: %s\nunit: sectors\nsector-size: 512\n\n"+
		"%s1 : start=        2048, size=%12d, type=83, bootable\n%s2 : start=%12d, size=%12d, type=83\n",
		img, img, p1Sectors, img, p2Start, fi.Size()/512-p2Start)
	if diff := cmp.Diff(want, tool(t, nil, "sfdisk", "-d", img)); diff != "" {
		t.Errorf("sfdisk -d (-want +got):\n%s", diff)
	}
	p1, p2 := extract(t, img, partitionOffset, d.FilesystemBytes), extract(t, img, partitionOffset+d.FilesystemBytes, fi.Size()-partitionOffset-d.FilesystemBytes)
	tool(t, nil, "e2fsck", "-fn", p1)
	if d.Verity.DataBlocks*verityBlockSize != uint64(d.FilesystemBytes) || d.Verity.Salt != hex.EncodeToString(testSalt) {
		t.Errorf("verity params %+v: want %d data blocks and the given salt", *d.Verity, d.FilesystemBytes/verityBlockSize)
	}
	if out, err := verifyTree(t, p1, p2, *d.Verity); err != nil {
		t.Fatalf("veritysetup verify of partition 1 against partition 2: %v\n%s", err, out)
	}
	flip(t, p1, 2*mib+17)
	if out, err := verifyTree(t, p1, p2, *d.Verity); err == nil {
		t.Errorf("veritysetup verify accepted partition 1 with a flipped byte:\n%s", out)
	}
}

func TestWriteDiskVerityDeterministic(t *testing.T) {
	a := writeTestDisk(t, diskTree(t, false), verityOptions())
	b := writeTestDisk(t, diskTree(t, true), verityOptions())
	if !sameFile(t, a, b) {
		t.Error("two verity WriteDisk runs of the same tree, salt and options differ")
	}
	other := verityOptions()
	other.VeritySalt = []byte("another salt")
	if sameFile(t, a, writeTestDisk(t, diskTree(t, false), other)) {
		t.Error("a different salt gave the same image: the salt is not used")
	}
}

// TestVerityHashBytes checks the layout's hash tree size against what veritysetup writes, across the
// level boundaries of the 128-ary tree.
func TestVerityHashBytes(t *testing.T) {
	dir := t.TempDir()
	for _, blocks := range []int64{1, 2, 128, 129, 128 * 128, 128*128 + 1, 40000} {
		data := filepath.Join(dir, "data")
		must(t, os.WriteFile(data, nil, 0o644))
		must(t, os.Truncate(data, blocks*verityBlockSize))
		p, err := FormatVerity(context.Background(), data, filepath.Join(dir, "hash"), testSalt)
		if err != nil {
			t.Fatalf("%d blocks: %v", blocks, err) // FormatVerity fails if the size differs from verityHashBytes
		}
		fi, err := os.Stat(filepath.Join(dir, "hash"))
		must(t, err)
		if fi.Size() != p.HashBytes || p.HashBytes != verityHashBytes(blocks*verityBlockSize) {
			t.Errorf("%d blocks: hash file %d bytes, veritysetup says %d, verityHashBytes %d", blocks, fi.Size(), p.HashBytes, verityHashBytes(blocks*verityBlockSize))
		}
	}
}

func TestFormatVerityErrors(t *testing.T) {
	dir := t.TempDir()
	odd := filepath.Join(dir, "odd")
	must(t, os.WriteFile(odd, make([]byte, 5000), 0o644))
	for _, tc := range []struct {
		name, data string
		salt       []byte
		want       string
	}{
		{"no salt", odd, nil, "Kata's runtime refuses an empty salt"},
		{"partial block", odd, testSalt, "5000 bytes, want a non-zero multiple of 4096"},
		{"missing data", filepath.Join(dir, "none"), testSalt, "no such file"},
	} {
		if _, err := FormatVerity(context.Background(), tc.data, filepath.Join(dir, "hash"), tc.salt); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want it to contain %q", tc.name, err, tc.want)
		}
	}
	opt := verityOptions()
	opt.VeritySalt = nil
	if _, err := checkDiskOptions(opt, nil); err == nil || !strings.Contains(err.Error(), "VeritySalt is empty") {
		t.Errorf("checkDiskOptions without a salt = %v, want a VeritySalt error", err)
	}
}

func TestParseVerityFormatMissing(t *testing.T) {
	_, err := parseVerityFormat([]byte("Root hash: ab\nSalt: cd\n"))
	if err == nil || !strings.Contains(err.Error(), `no "Data blocks" line`) || !strings.Contains(err.Error(), `no "Hash device size" line`) {
		t.Errorf("parseVerityFormat of a truncated output = %v, want it to name the missing fields", err)
	}
}

// verifyTree runs veritysetup verify, which reads every data block and checks it against the tree.
func verifyTree(t *testing.T, data, hash string, p VerityParams) (string, error) {
	t.Helper()
	path, err := lookTool("veritysetup")
	if err != nil {
		t.Fatal("veritysetup is missing: apt-get install cryptsetup-bin")
	}
	cmd := exec.Command(path, "verify", "--no-superblock", fmt.Sprintf("--data-blocks=%d", p.DataBlocks),
		fmt.Sprintf("--data-block-size=%d", p.DataBlockSize), fmt.Sprintf("--hash-block-size=%d", p.HashBlockSize),
		"--salt="+p.Salt, data, hash, p.RootHash)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// extract copies n bytes at off of img into a new file.
func extract(t *testing.T, img string, off, n int64) string {
	t.Helper()
	in, err := os.Open(img)
	must(t, err)
	defer in.Close()
	f, err := os.CreateTemp(t.TempDir(), "part")
	must(t, err)
	defer f.Close()
	_, err = io.Copy(f, io.NewSectionReader(in, off, n))
	must(t, err)
	return f.Name()
}

func flip(t *testing.T, path string, off int64) {
	t.Helper()
	b, err := os.ReadFile(path)
	must(t, err)
	if bytes.Equal(b[off:off+1], []byte{0}) {
		b[off] = 1
	} else {
		b[off] ^= 0xff
	}
	must(t, os.WriteFile(path, b, 0o644))
}
