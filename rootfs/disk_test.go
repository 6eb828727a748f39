package rootfs

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/allox-os/allox/initramfs"
)

var epoch = time.Unix(1700000000, 0)

var testOptions = DiskOptions{
	Label:    "allox-root",
	UUID:     "7c2a6e0e-3f7b-5d0a-9c51-2b1f0e6d4a10",
	HashSeed: "0b7f3c9e-8d21-5a46-b0e3-5f9d2c7a1e84",
	Mtime:    epoch,
}

// diskEntries covers every entry kind, special mode bits, owners above 65535, long and short symlinks,
// names that need quoting, and a file large enough to need several extents' worth of blocks.
func diskEntries(t *testing.T) []initramfs.Entry {
	src := filepath.Join(t.TempDir(), "init")
	big := bytes.Repeat([]byte("allox "), 1<<20) // 6 MiB
	must(t, os.WriteFile(src, big, 0o600))
	return []initramfs.Entry{
		{Path: "/usr/sbin/init", Mode: 0o755, Source: src},
		{Path: "/sbin", Mode: fs.ModeSymlink | 0o777, Link: "usr/sbin"},
		{Path: "/bin", Mode: fs.ModeSymlink | 0o777, Link: "usr/bin"},
		{Path: "/usr/bin/busybox", Mode: 0o755, Data: []byte("\x7fELF not really")},
		{Path: "/usr/bin/sh", Mode: fs.ModeSymlink | 0o777, Link: "/bin/busybox"},
		{Path: "/usr/bin/su", Mode: fs.ModeSetuid | 0o755, Data: []byte("su")},
		{Path: "/usr/lib/long-link", Mode: fs.ModeSymlink | 0o777, Link: "/" + strings.Repeat("very-long-target/", 6)},
		{Path: "/etc/resolv.conf", Mode: 0o644, Data: []byte{}},
		{Path: "/etc/hostname", Mode: 0o644, Data: []byte("allox\n")},
		{Path: "/etc/shadow", Mode: 0o640, GID: 42, Data: []byte("root:*:19000::::::\n")},
		{Path: "/dev/console", Mode: fs.ModeDevice | fs.ModeCharDevice | 0o600, Major: 5, Minor: 1},
		{Path: "/dev/vda", Mode: fs.ModeDevice | 0o660, GID: 6, Major: 254, Minor: 0},
		{Path: "/run/initctl", Mode: fs.ModeNamedPipe | 0o600},
		{Path: "/tmp", Mode: fs.ModeDir | fs.ModeSticky | 0o777},
		{Path: "/root", Mode: fs.ModeDir | 0o700},
		{Path: "/home/user", Mode: fs.ModeDir | fs.ModeSetgid | 0o750, UID: 100000, GID: 100000},
		{Path: `/home/user/a "quoted" name with spaces\`, Mode: 0o600, UID: 100000, GID: 100000, Data: []byte("q")},
	}
}

func diskTree(t *testing.T, reverse bool) *initramfs.Tree {
	es := diskEntries(t)
	if reverse {
		for i, j := 0, len(es)-1; i < j; i, j = i+1, j-1 {
			es[i], es[j] = es[j], es[i]
		}
	}
	tr := &initramfs.Tree{}
	for _, e := range es {
		must(t, tr.Add(e))
	}
	return tr
}

func writeTestDisk(t *testing.T, tr *initramfs.Tree, opt DiskOptions) string {
	t.Helper()
	img := filepath.Join(t.TempDir(), "rootfs.img")
	if _, err := WriteDisk(context.Background(), img, tr, opt); err != nil {
		t.Fatal(err)
	}
	return img
}

func TestWriteDiskPartitionTable(t *testing.T) {
	img := writeTestDisk(t, diskTree(t, false), testOptions)
	fi, err := os.Stat(img)
	must(t, err)
	if fi.Size()%mib != 0 {
		t.Errorf("image size %d is not a whole number of MiB", fi.Size())
	}
	want := int64(contentBytes(diskTree(t, false).Entries())*13/10+64*mib+mib-1) / mib * mib
	if fi.Size() != want {
		t.Errorf("automatic size = %d MiB, want %d MiB (content + 30%% + 64 MiB)", fi.Size()/mib, want/mib)
	}
	if used := fi.Sys().(*syscall.Stat_t).Blocks * 512; used >= fi.Size()/2 {
		t.Errorf("image uses %d of %d bytes on disk: want it sparse", used, fi.Size())
	}
	out := tool(t, nil, "sfdisk", "-d", img)
	wantDump := fmt.Sprintf("label: dos\nlabel-id: 0x00000000\ndevice: %s\nunit: sectors\nsector-size: 512\n\n%s1 : start=        2048, size=%12d, type=83\n",
		img, img, fi.Size()/512-2048)
	if d := cmp.Diff(wantDump, out); d != "" {
		t.Errorf("sfdisk -d (-want +got):\n%s", d)
	}
}

func TestWriteDiskFilesystem(t *testing.T) {
	tr := diskTree(t, false)
	part := partitionOf(t, writeTestDisk(t, tr, testOptions))
	tool(t, nil, "e2fsck", "-fn", part)

	super := tool(t, nil, "dumpe2fs", "-h", part)
	for _, want := range []string{
		"Filesystem volume name:   allox-root",
		"Filesystem UUID:          " + testOptions.UUID,
		"Directory Hash Seed:      " + testOptions.HashSeed,
		"Block size:               4096",
		"Filesystem created:       Tue Nov 14 22:13:20 2023",
		"Reserved block count:     0",
	} {
		if !strings.Contains(super, want) {
			t.Errorf("dumpe2fs -h lacks %q", want)
		}
	}
	if m := regexp.MustCompile(`Filesystem features:\s+(.*)`).FindStringSubmatch(super); m == nil || !strings.Contains(m[1], "has_journal") || !strings.Contains(m[1], "extent") || !strings.Contains(m[1], "metadata_csum") {
		t.Errorf("features: %v", m)
	}

	got := statAll(t, part, tr.Entries())
	for _, e := range tr.Entries() {
		want := inodeSummary{
			Mode: fmt.Sprintf("%o", initramfs.UnixMode(e.Mode)&0o7777), UID: e.UID, GID: e.GID,
			Link: e.Link, Times: strings.Repeat("0x6553f100:00000000 ", 4),
		}
		if e.Mode&fs.ModeDevice != 0 {
			want.Device = fmt.Sprintf("%d:%d", e.Major, e.Minor)
		}
		if e.Mode.IsRegular() {
			want.Size = e.Size
		}
		want.Type = map[string]string{"directory": "directory", "symlink": "symlink", "file": "regular",
			"character device": "character special", "block device": "block special", "fifo": "FIFO"}[e.Kind()]
		if d := cmp.Diff(want, got[e.Path]); d != "" {
			t.Errorf("%s (-want +got):\n%s", e.Path, d)
		}
	}

	dump := t.TempDir()
	tool(t, nil, "debugfs", "-R", "rdump /usr/sbin /home/user "+dump, part)
	for host, e := range map[string]string{"sbin/init": "/usr/sbin/init", `user/a "quoted" name with spaces\`: `/home/user/a "quoted" name with spaces\`} {
		b, err := os.ReadFile(filepath.Join(dump, host))
		must(t, err)
		en, _ := tr.Lookup(e)
		wantData := en.Data
		if en.Source != "" {
			wantData, _ = os.ReadFile(en.Source)
		}
		if !bytes.Equal(b, wantData) {
			t.Errorf("%s: contents differ (%d bytes, want %d)", e, len(b), len(wantData))
		}
	}
}

func TestWriteDiskDeterministic(t *testing.T) {
	a := writeTestDisk(t, diskTree(t, false), testOptions)
	time.Sleep(1100 * time.Millisecond) // a leaked clock would now show
	b := writeTestDisk(t, diskTree(t, true), testOptions)
	if !sameFile(t, a, b) {
		t.Error("two WriteDisk runs of the same tree and options differ")
	}
	// Epoch 0 (mkimage's default SOURCE_DATE_EPOCH) must not let the clock in either: e2fsprogs reads
	// E2FSPROGS_FAKE_TIME=0 as unset.
	zero := testOptions
	zero.Mtime = time.Unix(0, 0)
	z1 := writeTestDisk(t, diskTree(t, false), zero)
	time.Sleep(1100 * time.Millisecond)
	if !sameFile(t, z1, writeTestDisk(t, diskTree(t, false), zero)) {
		t.Error("two WriteDisk runs at epoch 0 differ")
	}
	opt := testOptions
	opt.UUID = "7c2a6e0e-3f7b-5d0a-9c51-2b1f0e6d4a11"
	if sameFile(t, a, writeTestDisk(t, diskTree(t, false), opt)) {
		t.Error("a different UUID gave the same image")
	}
}

func TestWriteDiskMounts(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting needs root: run go test as root (CI does)")
	}
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		t.Skip("no loop devices (/dev/loop-control) to mount the image; run on a host or VM that has them")
	}
	img := writeTestDisk(t, diskTree(t, false), testOptions)
	mnt := t.TempDir()
	// Kata's image-mode rootflags, on partition 1.
	tool(t, nil, "mount", "-t", "ext4", "-o", "ro,loop,offset=1048576,data=ordered,errors=remount-ro", img, mnt)
	t.Cleanup(func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount: %v %s", err, out)
		}
	})
	fi, err := os.Stat(filepath.Join(mnt, "sbin/init"))
	if err != nil || fi.Mode() != 0o755 || fi.Size() != 6<<20 {
		t.Errorf("/sbin/init through the kernel: %v %v", fi, err)
	}
	if l, err := os.Readlink(filepath.Join(mnt, "usr/lib/long-link")); err != nil || !strings.HasSuffix(l, "very-long-target/") {
		t.Errorf("long symlink: %q %v", l, err)
	}
	st, err := os.Lstat(filepath.Join(mnt, "dev/console"))
	if err != nil || st.Sys().(*syscall.Stat_t).Rdev != 5<<8|1 {
		t.Errorf("/dev/console: %v %v", st, err)
	}
}

func TestDiskOptionErrors(t *testing.T) {
	entries := diskTree(t, false).Entries()
	for _, tc := range []struct {
		name string
		edit func(*DiskOptions)
		want string
	}{
		{"random-looking uuid", func(o *DiskOptions) { o.UUID = "not-a-uuid" }, "UUID \"not-a-uuid\""},
		{"upper-case seed", func(o *DiskOptions) { o.HashSeed = strings.ToUpper(o.HashSeed) }, "HashSeed"},
		{"long label", func(o *DiskOptions) { o.Label = "a-label-longer-than-16" }, `e.g. "a-label-longer-t"`},
		{"too small", func(o *DiskOptions) { o.SizeMiB = 8 }, "SizeMiB 8 is too small for 6 MiB of content: use at least 24"},
		{"negative size", func(o *DiskOptions) { o.SizeMiB = -1 }, "want 0 (automatic"},
		{"zero time", func(o *DiskOptions) { o.Mtime = time.Time{} }, "SOURCE_DATE_EPOCH"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opt := testOptions
			tc.edit(&opt)
			if _, err := checkDiskOptions(opt, entries); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("checkDiskOptions = %v, want an error containing %q", err, tc.want)
			}
		})
	}
	opt := testOptions
	opt.SizeMiB = 40
	if size, err := checkDiskOptions(opt, entries); err != nil || size != 40 {
		t.Errorf("SizeMiB 40: %d, %v", size, err)
	}
}

// inodeSummary is what debugfs stat says about an inode, reduced to what the tree determines.
type inodeSummary struct {
	Type, Mode   string
	UID, GID     int
	Size         int64
	Link, Device string
	Times        string
}

var (
	statTypeRE   = regexp.MustCompile(`Type: (.+?)\s+Mode:\s+(\d+)`)
	statOwnerRE  = regexp.MustCompile(`User:\s+(\d+)\s+Group:\s+(\d+).*Size: (\d+)`)
	statLinkRE   = regexp.MustCompile(`Fast link dest: "(.*)"`)
	statDeviceRE = regexp.MustCompile(`Device major/minor number: (\d+):(\d+)`)
	statTimeRE   = regexp.MustCompile(`(?m)^\s*(?:a|m|c|cr)time: (0x[0-9a-f]+:[0-9a-f]+)`)
)

// statAll runs one debugfs with a stat per entry and parses the answers.
func statAll(t *testing.T, part string, entries []initramfs.Entry) map[string]inodeSummary {
	var script bytes.Buffer
	for _, e := range entries {
		fmt.Fprintf(&script, "stat %s\n", debugfsQuote(e.Path))
	}
	out := tool(t, script.Bytes(), "debugfs", "-f", "-", part)
	blocks := strings.Split(out, "debugfs: stat ")[1:]
	if len(blocks) != len(entries) {
		t.Fatalf("debugfs answered %d stats for %d entries", len(blocks), len(entries))
	}
	got := map[string]inodeSummary{}
	for i, b := range blocks {
		var s inodeSummary
		if m := statTypeRE.FindStringSubmatch(b); m != nil {
			mode, _ := strconv.ParseUint(m[2], 8, 32)
			s.Type, s.Mode = m[1], fmt.Sprintf("%o", mode)
		}
		if m := statOwnerRE.FindStringSubmatch(b); m != nil {
			s.UID, _ = strconv.Atoi(m[1])
			s.GID, _ = strconv.Atoi(m[2])
			if s.Type == "regular" {
				s.Size, _ = strconv.ParseInt(m[3], 10, 64)
			}
		}
		if m := statLinkRE.FindStringSubmatch(b); m != nil {
			s.Link = m[1]
		} else if s.Type == "symlink" {
			s.Link = slowLink(t, part, entries[i].Path)
		}
		if m := statDeviceRE.FindStringSubmatch(b); m != nil {
			ma, _ := strconv.Atoi(m[1])
			mi, _ := strconv.Atoi(m[2])
			s.Device = fmt.Sprintf("%d:%d", ma, mi)
		}
		for _, m := range statTimeRE.FindAllStringSubmatch(b, -1) {
			s.Times += m[1] + " "
		}
		got[entries[i].Path] = s
	}
	return got
}

// slowLink reads a symlink stored in a data block.
func slowLink(t *testing.T, part, p string) string {
	dir := t.TempDir()
	tool(t, nil, "debugfs", "-R", "rdump "+debugfsQuote(p)+" "+dir, part)
	l, err := os.Readlink(filepath.Join(dir, filepath.Base(p)))
	must(t, err)
	return l
}

// partitionOf copies partition 1 (from 1 MiB to the end) of a disk image to a file of its own.
func partitionOf(t *testing.T, img string) string {
	in, err := os.Open(img)
	must(t, err)
	defer in.Close()
	part := filepath.Join(t.TempDir(), "part1.ext4")
	out, err := os.Create(part)
	must(t, err)
	defer out.Close()
	_, err = io.Copy(out, io.NewSectionReader(in, partitionOffset, 1<<40))
	must(t, err)
	return part
}

func sameFile(t *testing.T, a, b string) bool {
	x, err := os.ReadFile(a)
	must(t, err)
	y, err := os.ReadFile(b)
	must(t, err)
	return bytes.Equal(x, y)
}

// tool runs a reference tool and returns its stdout; a non-zero exit fails the test.
func tool(t *testing.T, stdin []byte, name string, args ...string) string {
	t.Helper()
	path, err := lookTool(name)
	if err != nil {
		t.Fatalf("reference tool %s is missing: apt-get install e2fsprogs fdisk", name)
	}
	cmd := exec.Command(path, args...)
	cmd.Env = append(os.Environ(), "LC_ALL=C", "TZ=UTC")
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, out, stderr.String())
	}
	return string(out)
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
