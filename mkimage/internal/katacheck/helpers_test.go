package katacheck

import (
	"compress/gzip"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/cavaliergopher/cpio"
	"github.com/diskfs/go-diskfs/partition/mbr"

	"github.com/allox-os/allox/rootfs/dax"
)

// entry is one file of a test root: a regular file (data), a directory (dir) or a symlink (link).
type entry struct {
	path string
	mode os.FileMode
	data string
	dir  bool
	link string
}

// goodRoot is the smallest root Kata accepts: /sbin/init through the usrmerge symlink, an empty
// /etc/resolv.conf.
func goodRoot() []entry {
	return []entry{
		{path: "usr/sbin/init", mode: 0o755, data: "#!/bin/sh\n"},
		{path: "sbin", link: "usr/sbin"},
		{path: "etc/resolv.conf", mode: 0o644},
	}
}

// replace returns root with the entry for path replaced by e (or removed when e.path is "").
func replace(root []entry, path string, e entry) []entry {
	var out []entry
	for _, r := range root {
		if r.path != path {
			out = append(out, r)
		}
	}
	if e.path != "" {
		out = append(out, e)
	}
	return out
}

// writeRoot lays the entries out in a fresh directory.
func writeRoot(t *testing.T, root []entry) string {
	t.Helper()
	dir := t.TempDir()
	for _, e := range root {
		p := filepath.Join(dir, e.path)
		must(t, os.MkdirAll(filepath.Dir(p), 0o755))
		switch {
		case e.link != "":
			must(t, os.Symlink(e.link, p))
		case e.dir:
			must(t, os.Mkdir(p, 0o755))
		default:
			must(t, os.WriteFile(p, []byte(e.data), 0o600))
			must(t, os.Chmod(p, e.mode))
		}
	}
	return dir
}

// disk describes a test image: partitions as (start sector, sectors) with the ext4 filesystem in
// the first; the image is sizeMiB long.
type disk struct {
	sizeMiB int64
	parts   [][2]uint32
}

var oneRoot = disk{sizeMiB: 40, parts: [][2]uint32{{2048, 39 * 2048}}}

// writeImage makes a real ext4 filesystem from root with mke2fs -d and puts it in partition 1 of an
// MBR written with go-diskfs.
func writeImage(t *testing.T, root []entry, d disk) string {
	t.Helper()
	for _, tool := range []string{"mke2fs", "debugfs"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not found: apt-get install e2fsprogs", tool)
		}
	}
	work := t.TempDir()
	fsImg := filepath.Join(work, "fs.ext4")
	fsBytes := int64(d.parts[0][1]) * 512
	out, err := exec.Command("mke2fs", "-q", "-F", "-t", "ext4", "-d", writeRoot(t, root), fsImg,
		strconv.FormatInt(fsBytes/1024, 10)+"k").CombinedOutput()
	if err != nil {
		t.Fatalf("mke2fs: %v\n%s", err, out)
	}
	img := filepath.Join(work, "rootfs.img")
	f, err := os.Create(img)
	must(t, err)
	defer f.Close()
	must(t, f.Truncate(d.sizeMiB<<20))
	table := &mbr.Table{LogicalSectorSize: 512, PhysicalSectorSize: 512}
	for i, p := range d.parts {
		table.Partitions = append(table.Partitions, &mbr.Partition{Index: i + 1, Type: mbr.Linux, Start: p[0], Size: p[1]})
	}
	must(t, table.Write(f, d.sizeMiB<<20))
	data, err := os.ReadFile(fsImg)
	must(t, err)
	_, err = f.WriteAt(data, int64(d.parts[0][0])*512)
	must(t, err)
	return img
}

// withHeader returns a copy of img with the DAX header, padded to align.
func withHeader(t *testing.T, img string, align int64) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "rootfs-dax.img")
	must(t, dax.WrapFile(dst, img, dax.Options{Seed: []byte("katacheck"), SizeAlign: align}))
	return dst
}

// writeInitrd writes root as a gzip'd newc cpio with the cavaliergopher/cpio writer.
func writeInitrd(t *testing.T, root []entry) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "initramfs.cpio.gz")
	f, err := os.Create(p)
	must(t, err)
	defer f.Close()
	zw := gzip.NewWriter(f)
	w := cpio.NewWriter(zw)
	for _, e := range root {
		h := &cpio.Header{Name: e.path, Mode: cpio.FileMode(e.mode.Perm())}
		switch {
		case e.link != "":
			h.Mode, h.Linkname, h.Size = cpio.TypeSymlink|0o777, e.link, int64(len(e.link))
		case e.dir:
			h.Mode |= cpio.TypeDir
		default:
			h.Mode |= cpio.TypeReg
			h.Size = int64(len(e.data))
		}
		must(t, w.WriteHeader(h))
		body := e.data
		if e.link != "" {
			body = e.link
		}
		_, err := w.Write([]byte(body))
		must(t, err)
	}
	must(t, w.Close())
	must(t, zw.Close())
	return p
}

// writeKernelConfig writes a .config with every symbol t needs =y, except those in off.
func writeKernelConfig(t *testing.T, tg *Target, off ...string) string {
	t.Helper()
	var b strings.Builder
	groups := tg.required()
	if g, err := tg.blockDriver(); err == nil {
		groups = append(groups, g)
	}
	for _, g := range groups {
		for _, s := range g.syms {
			if contains(off, s) {
				b.WriteString("# CONFIG_" + s + " is not set\n")
			} else {
				b.WriteString("CONFIG_" + s + "=y\n")
			}
		}
	}
	p := filepath.Join(t.TempDir(), "kernel.config")
	must(t, os.WriteFile(p, []byte(b.String()), 0o644))
	return p
}

// result runs every rule and returns the report and the named rule's result.
func result(t *testing.T, tg *Target, rule string) (Report, Result) {
	t.Helper()
	r := tg.Check(context.Background())
	for _, res := range r {
		if res.Rule == rule {
			return r, res
		}
	}
	t.Fatalf("no rule %q in the report:\n%s", rule, r)
	return nil, Result{}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
