package rootfs

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/allox-os/allox/initramfs"
)

// mmdebstrapLikeTar is laid out as mmdebstrap writes: "./dev/" before "./", merged-/usr symlinks,
// device nodes, a hard link and a PAX global header.
func mmdebstrapLikeTar(t *testing.T) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(h *tar.Header, data string) {
		h.Size = int64(len(data))
		h.Format = tar.FormatPAX
		must(t, tw.WriteHeader(h))
		_, err := tw.Write([]byte(data))
		must(t, err)
	}
	add(&tar.Header{Typeflag: tar.TypeXGlobalHeader, Name: "pax_global_header", PAXRecords: map[string]string{"comment": "x"}}, "")
	add(&tar.Header{Typeflag: tar.TypeDir, Name: "./dev/", Mode: 0o755}, "")
	add(&tar.Header{Typeflag: tar.TypeChar, Name: "./dev/console", Mode: 0o600, Devmajor: 5, Devminor: 1}, "")
	add(&tar.Header{Typeflag: tar.TypeBlock, Name: "./dev/loop0", Mode: 0o660, Gid: 6, Devmajor: 7}, "")
	add(&tar.Header{Typeflag: tar.TypeFifo, Name: "./dev/initctl", Mode: 0o600}, "")
	add(&tar.Header{Typeflag: tar.TypeDir, Name: "./", Mode: 0o755}, "")
	add(&tar.Header{Typeflag: tar.TypeSymlink, Name: "./bin", Linkname: "usr/bin", Mode: 0o777}, "")
	add(&tar.Header{Typeflag: tar.TypeDir, Name: "./tmp/", Mode: 0o1777}, "")
	add(&tar.Header{Typeflag: tar.TypeDir, Name: "./usr/", Mode: 0o755}, "")
	add(&tar.Header{Typeflag: tar.TypeDir, Name: "./usr/bin/", Mode: 0o755}, "")
	add(&tar.Header{Typeflag: tar.TypeReg, Name: "./usr/bin/busybox", Mode: 0o755}, "busybox!")
	add(&tar.Header{Typeflag: tar.TypeLink, Name: "./usr/bin/busybox-hard", Linkname: "./usr/bin/busybox", Mode: 0o755}, "")
	add(&tar.Header{Typeflag: tar.TypeReg, Name: "./usr/bin/su", Mode: 0o4755, Uid: 0, Gid: 0}, "su")
	add(&tar.Header{Typeflag: tar.TypeReg, Name: "./usr/lib/owned", Mode: 0o2640, Uid: 100, Gid: 101}, "")
	must(t, tw.Close())
	return buf.Bytes()
}

func TestStage(t *testing.T) {
	want := []initramfs.Entry{
		{Path: "/", Mode: fs.ModeDir | 0o755},
		{Path: "/bin", Mode: fs.ModeSymlink | 0o777, Link: "usr/bin"},
		{Path: "/dev", Mode: fs.ModeDir | 0o755},
		{Path: "/dev/console", Mode: fs.ModeDevice | fs.ModeCharDevice | 0o600, Major: 5, Minor: 1},
		{Path: "/dev/initctl", Mode: fs.ModeNamedPipe | 0o600},
		{Path: "/dev/loop0", Mode: fs.ModeDevice | 0o660, GID: 6, Major: 7},
		{Path: "/tmp", Mode: fs.ModeDir | fs.ModeSticky | 0o777},
		{Path: "/usr", Mode: fs.ModeDir | 0o755},
		{Path: "/usr/bin", Mode: fs.ModeDir | 0o755},
		{Path: "/usr/bin/busybox", Mode: 0o755, Size: 8, Data: []byte("busybox!")},
		{Path: "/usr/bin/busybox-hard", Mode: 0o755, Size: 8, Data: []byte("busybox!")},
		{Path: "/usr/bin/su", Mode: fs.ModeSetuid | 0o755, Size: 2, Data: []byte("su")},
		{Path: "/usr/lib", Mode: fs.ModeDir | 0o755},
		{Path: "/usr/lib/owned", Mode: fs.ModeSetgid | 0o640, UID: 100, GID: 101, Data: []byte{}},
	}
	plain := mmdebstrapLikeTar(t)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, err := zw.Write(plain)
	must(t, err)
	must(t, zw.Close())
	for name, data := range map[string][]byte{"rootfs.tar": plain, "rootfs.tar.gz": gz.Bytes()} {
		t.Run(name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), name)
			must(t, os.WriteFile(file, data, 0o644))
			tr, err := Stage(file)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(want, tr.Entries()); d != "" {
				t.Errorf("Stage (-want +got):\n%s", d)
			}
		})
	}
}

func TestStageErrors(t *testing.T) {
	for name, h := range map[string]*tar.Header{
		"dangling hard link": {Typeflag: tar.TypeLink, Name: "./a", Linkname: "./missing"},
		"socket-like type":   {Typeflag: 'S', Name: "./sparse", Mode: 0o644},
	} {
		t.Run(name, func(t *testing.T) {
			var buf bytes.Buffer
			tw := tar.NewWriter(&buf)
			must(t, tw.WriteHeader(h))
			must(t, tw.Close())
			file := filepath.Join(t.TempDir(), "bad.tar")
			must(t, os.WriteFile(file, buf.Bytes(), 0o644))
			if _, err := Stage(file); err == nil || !strings.Contains(err.Error(), "bad.tar") {
				t.Errorf("Stage = %v, want an error naming the tarball", err)
			}
		})
	}
}
