package initramfs

import (
	"bytes"
	"compress/gzip"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cavaliergopher/cpio"
	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

var epoch = time.Unix(1700000000, 0)

// sampleEntries covers every entry kind, special mode bits, non-root owners and implied parents.
func sampleEntries(t *testing.T) []Entry {
	src := filepath.Join(t.TempDir(), "prog")
	must(t, os.WriteFile(src, []byte("#!/bin/sh\necho hello\n"), 0o600))
	return []Entry{
		{Path: "/etc/hostname", Mode: 0o644, Data: []byte("allox\n")},
		{Path: "/etc/resolv.conf", Mode: 0o644, Data: []byte{}},
		{Path: "/usr/bin/prog", Mode: 0o755, Source: src},
		{Path: "/usr/bin/su", Mode: fs.ModeSetuid | 0o755, Data: []byte("su")},
		{Path: "/bin", Mode: fs.ModeSymlink | 0o777, Link: "usr/bin"},
		{Path: "/sbin/init", Mode: fs.ModeSymlink | 0o777, Link: "/usr/bin/prog"},
		{Path: "/dev/console", Mode: fs.ModeDevice | fs.ModeCharDevice | 0o600, Major: 5, Minor: 1},
		{Path: "/dev/vda", Mode: fs.ModeDevice | 0o660, GID: 6, Major: 254, Minor: 0},
		{Path: "/run/initctl", Mode: fs.ModeNamedPipe | 0o600},
		{Path: "/tmp", Mode: fs.ModeDir | fs.ModeSticky | 0o777},
		{Path: "/home/user", Mode: fs.ModeDir | 0o700, UID: 1000, GID: 1000},
		{Path: "/home/user/.profile", Mode: 0o640, UID: 1000, GID: 1000, Data: []byte("export PS1='$ '\n")},
		{Path: "/var/lib/allox/workspaces/empty", Mode: fs.ModeSetgid | 0o750, Data: []byte{}},
	}
}

func sampleTree(t *testing.T, reverse bool) *Tree {
	es := sampleEntries(t)
	if reverse {
		for i, j := 0, len(es)-1; i < j; i, j = i+1, j-1 {
			es[i], es[j] = es[j], es[i]
		}
	}
	tr := &Tree{}
	for _, e := range es {
		must(t, tr.Add(e))
	}
	return tr
}

func archive(t *testing.T, tr *Tree) []byte {
	t.Helper()
	var buf bytes.Buffer
	must(t, Write(&buf, tr, epoch))
	return buf.Bytes()
}

func TestGolden(t *testing.T) {
	got := archive(t, sampleTree(t, false))
	golden := filepath.Join("testdata", "sample.cpio")
	if *update {
		must(t, os.WriteFile(golden, got, 0o644))
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test ./initramfs -run TestGolden -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("archive differs from %s (%d vs %d bytes); if the change is intended, run with -update", golden, len(got), len(want))
	}
}

func TestDeterministic(t *testing.T) {
	a, b := archive(t, sampleTree(t, false)), archive(t, sampleTree(t, true))
	if !bytes.Equal(a, b) {
		t.Error("two insertion orders gave different archives")
	}
	if c := archive(t, sampleTree(t, false)); !bytes.Equal(a, c) {
		t.Error("two writes of the same tree differ")
	}
}

func cpioTool(t *testing.T, stdin []byte, dir string, args ...string) string {
	t.Helper()
	if _, err := exec.LookPath("cpio"); err != nil {
		t.Fatalf("the reference tool is missing: apt-get install cpio (%v)", err)
	}
	cmd := exec.Command("cpio", args...)
	cmd.Dir = dir
	cmd.Stdin = bytes.NewReader(stdin)
	cmd.Env = append(os.Environ(), "TZ=UTC", "LC_ALL=C")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("cpio %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out)
}

func TestCpioList(t *testing.T) {
	tr := sampleTree(t, false)
	data := archive(t, tr)
	var want []string
	for _, e := range tr.Entries() {
		want = append(want, cpioName(e.Path))
	}
	got := strings.Fields(cpioTool(t, data, "", "-t", "--quiet"))
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("cpio -t (-want +got):\n%s", d)
	}
}

func TestCpioListVerbose(t *testing.T) {
	tr := sampleTree(t, false)
	out := cpioTool(t, archive(t, tr), "", "-tvn", "--quiet")
	var got []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		got = append(got, normalizeListing(line))
	}
	want := []string{
		"drwxr-xr-x 10 0 0 0 .", // 8 subdirectories: dev etc home run sbin tmp usr var
		"lrwxrwxrwx 1 0 0 7 bin -> usr/bin",
		"drwxr-xr-x 2 0 0 0 dev",
		"crw------- 1 0 0 5,1 dev/console",
		"brw-rw---- 1 0 6 254,0 dev/vda",
		"drwxr-xr-x 2 0 0 0 etc",
		"-rw-r--r-- 1 0 0 6 etc/hostname",
		"-rw-r--r-- 1 0 0 0 etc/resolv.conf",
		"drwxr-xr-x 3 0 0 0 home",
		"drwx------ 2 1000 1000 0 home/user",
		"-rw-r----- 1 1000 1000 16 home/user/.profile",
		"drwxr-xr-x 2 0 0 0 run",
		"prw------- 1 0 0 0 run/initctl",
		"drwxr-xr-x 2 0 0 0 sbin",
		"lrwxrwxrwx 1 0 0 13 sbin/init -> /usr/bin/prog",
		"drwxrwxrwt 2 0 0 0 tmp",
		"drwxr-xr-x 3 0 0 0 usr",
		"drwxr-xr-x 2 0 0 0 usr/bin",
		"-rwxr-xr-x 1 0 0 21 usr/bin/prog",
		"-rwsr-xr-x 1 0 0 2 usr/bin/su",
		"drwxr-xr-x 3 0 0 0 var",
		"drwxr-xr-x 3 0 0 0 var/lib",
		"drwxr-xr-x 3 0 0 0 var/lib/allox",
		"drwxr-xr-x 2 0 0 0 var/lib/allox/workspaces",
		"-rwxr-s--- 1 0 0 0 var/lib/allox/workspaces/empty",
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("cpio -tvn (-want +got):\n%s", d)
	}
	if !strings.Contains(out, "Nov 14  2023") {
		t.Errorf("cpio -tv shows no entry dated Nov 14 2023 (the mtime written):\n%s", out)
	}
}

// normalizeListing turns "crw-------   1 0 0 5,   1 Nov 14  2023 dev/console" into
// "crw------- 1 0 0 5,1 dev/console", dropping the date.
func normalizeListing(line string) string {
	f := strings.Fields(line)
	size := f[4]
	rest := f[8:]
	if strings.HasSuffix(size, ",") { // device: "5," "1"
		size += f[5]
		rest = f[9:]
	}
	return strings.Join(append([]string{f[0], f[1], f[2], f[3], size}, rest...), " ")
}

func TestCpioExtract(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("extracting owners and device nodes needs root: run go test as root (CI does)")
	}
	tr := sampleTree(t, false)
	dir := t.TempDir()
	cpioTool(t, archive(t, tr), dir, "-idm", "--quiet", "--no-absolute-filenames")
	back, err := FromDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(comparable(t, tr), comparable(t, back)); d != "" {
		t.Errorf("extracted tree differs (-archived +extracted):\n%s", d)
	}
	for _, e := range back.Entries() {
		// GNU cpio -m restores the mtime of files but not of symlinks or directories it filled;
		// TestReadBack checks every header's mtime.
		if e.Mode&fs.ModeSymlink != 0 || e.IsDir() {
			continue
		}
		fi, err := os.Lstat(filepath.Join(dir, e.Path))
		if err != nil {
			t.Fatal(err)
		}
		if !fi.ModTime().Equal(epoch) {
			t.Errorf("%s: mtime %v, want %v", e.Path, fi.ModTime(), epoch)
		}
	}
}

// comparable replaces contents by their text so that trees built from Data and from Source compare.
func comparable(t *testing.T, tr *Tree) []string {
	var out []string
	for _, e := range tr.Entries() {
		content := string(e.Data)
		if e.Source != "" {
			b, err := os.ReadFile(e.Source)
			must(t, err)
			content = string(b)
		}
		out = append(out, fmt.Sprintf("%s %v %d:%d size=%d link=%q dev=%d:%d %q",
			e.Path, e.Mode, e.UID, e.GID, e.Size, e.Link, e.Major, e.Minor, content))
	}
	return out
}

// TestReadBack reads the archive with the library's reader: names, modes, sizes and symlink targets.
func TestReadBack(t *testing.T) {
	tr := sampleTree(t, false)
	r := cpio.NewReader(bytes.NewReader(archive(t, tr)))
	for i, e := range tr.Entries() {
		h, err := r.Next()
		if err != nil {
			t.Fatalf("entry %d (%s): %v", i, e.Path, err)
		}
		if h.Name != cpioName(e.Path) || h.Mode != cpioMode(e.Mode) || h.Linkname != e.Link || h.Inode != int64(i+1) || !h.ModTime.Equal(epoch) {
			t.Errorf("entry %d = %+v, want %s %v link %q", i, h, e.Path, cpioMode(e.Mode), e.Link)
		}
		if e.Mode.IsRegular() {
			b, _ := io.ReadAll(r)
			if int64(len(b)) != e.Size {
				t.Errorf("%s: read %d bytes, want %d", e.Path, len(b), e.Size)
			}
		}
	}
	if _, err := r.Next(); err != io.EOF {
		t.Errorf("after the last entry: %v, want io.EOF (trailer)", err)
	}
}

func TestWriteGzip(t *testing.T) {
	tr := sampleTree(t, false)
	var a, b bytes.Buffer
	must(t, WriteGzip(&a, tr, epoch))
	must(t, WriteGzip(&b, sampleTree(t, true), epoch))
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Error("WriteGzip is not deterministic")
	}
	zr, err := gzip.NewReader(&a)
	must(t, err)
	if zr.Name != "" || !zr.ModTime.IsZero() {
		t.Errorf("gzip header name %q mtime %v, want none", zr.Name, zr.ModTime)
	}
	plain, err := io.ReadAll(zr)
	must(t, err)
	if !bytes.Equal(plain, archive(t, tr)) {
		t.Error("gunzipped WriteGzip differs from Write")
	}
}

func TestWriteErrors(t *testing.T) {
	tr := &Tree{}
	src := filepath.Join(t.TempDir(), "f")
	must(t, os.WriteFile(src, []byte("12345"), 0o644))
	must(t, tr.Add(Entry{Path: "/f", Mode: 0o644, Source: src}))
	if err := Write(io.Discard, tr, time.Unix(-1, 0)); err == nil || !strings.Contains(err.Error(), "SOURCE_DATE_EPOCH") {
		t.Errorf("negative mtime: %v", err)
	}
	must(t, os.WriteFile(src, []byte("12"), 0o644))
	if err := Write(io.Discard, tr, epoch); err == nil || !strings.Contains(err.Error(), "shrank") {
		t.Errorf("shrunk source: %v", err)
	}
	must(t, os.WriteFile(src, []byte("1234567"), 0o644))
	if err := Write(io.Discard, tr, epoch); err == nil || !strings.Contains(err.Error(), "grew") {
		t.Errorf("grown source: %v", err)
	}
}
