package kataagent

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestExtract takes the stand-in out of a Kata-like kata-containers.img (with and without the
// NVDIMM DAX header) and kata-containers-initrd.img (gzip and zstd), through the symlinks Kata's
// roots may have, and checks the bytes and that it runs.
func TestExtract(t *testing.T) {
	bin := standin(t)
	want, err := os.ReadFile(bin)
	must(t, err)
	wantVersion, err := Version(context.Background(), bin)
	must(t, err)
	if !strings.HasPrefix(wantVersion, "kata-agent version ") {
		t.Fatalf("the stand-in's --version: %q; want the real agent's form, \"kata-agent version ...\"", wantVersion)
	}
	root := guestRoot(t, bin)
	for _, tc := range []struct {
		name, format string
		image        func() string
	}{
		{"image", "MBR disk image, partition 1 at 1 MiB, ext4 (a sparse file, read with debugfs)", func() string { return kataImage(t, root, false) }},
		{"image behind the DAX header", "MBR disk image, partition 1 at 3 MiB (behind the NVDIMM DAX header), ext4 (a sparse file, read with debugfs)", func() string { return kataImage(t, root, true) }},
		{"gzip initrd", "gzip'd newc cpio", func() string { return kataInitrd(t, root, "gzip") }},
		{"zstd initrd", "zstd-compressed newc cpio", func() string { return kataInitrd(t, root, "zstd") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst := filepath.Join(t.TempDir(), "kata-agent")
			found, err := Extract(tc.image(), dst)
			if err != nil {
				t.Fatal(err)
			}
			if found.Format != tc.format || found.Path != "/opt/kata/bin/kata-agent" {
				t.Errorf("found %+v; want format %q, path /opt/kata/bin/kata-agent (through the /usr/bin/kata-agent symlink)", found, tc.format)
			}
			got, err := os.ReadFile(dst)
			must(t, err)
			if !bytes.Equal(got, want) {
				t.Fatalf("extracted %d bytes that differ from the %d of the stand-in", len(got), len(want))
			}
			if fi, _ := os.Stat(dst); fi.Mode().Perm() != 0o755 {
				t.Errorf("mode %v, want 0755", fi.Mode())
			}
			v, err := Version(context.Background(), dst)
			if err != nil || v != wantVersion {
				t.Errorf("Version = %q, %v; want %q", v, err, wantVersion)
			}
		})
	}
}

// TestExtractDense reads a file without holes (as Kata's image builder writes the agent, with cp
// into the mounted filesystem) through go-diskfs alone.
func TestExtractDense(t *testing.T) {
	agent := filepath.Join(t.TempDir(), "kata-agent")
	script := "#!/bin/sh\necho 'kata-agent version 9.9.9 (api version: 0.0.1, commit version: dense, type: rust, extra-features: [])'\n"
	script += strings.Repeat("# padding without zero blocks\n", 1<<14) // 480 KiB: many blocks, several reads
	must(t, os.WriteFile(agent, []byte(script), 0o755))
	dst := filepath.Join(t.TempDir(), "out")
	found, err := Extract(kataImage(t, guestRoot(t, agent), true), dst)
	if err != nil {
		t.Fatal(err)
	}
	if want := "MBR disk image, partition 1 at 3 MiB (behind the NVDIMM DAX header), ext4"; found.Format != want {
		t.Errorf("format %q, want %q", found.Format, want)
	}
	if got, _ := os.ReadFile(dst); string(got) != script {
		t.Errorf("extracted %d bytes that differ from the %d written", len(got), len(script))
	}
	if v, err := Version(context.Background(), dst); err != nil || !strings.Contains(v, "9.9.9") {
		t.Errorf("Version = %q, %v", v, err)
	}
}

func TestExtractWithoutAgent(t *testing.T) {
	root := guestRoot(t, "")
	for name, img := range map[string]string{"image": kataImage(t, root, false), "initrd": kataInitrd(t, root, "gzip")} {
		_, err := Extract(img, filepath.Join(t.TempDir(), "kata-agent"))
		if !errors.Is(err, ErrNoAgent) || !strings.Contains(err.Error(), "/usr/bin/kata-agent does not exist") {
			t.Errorf("%s without an agent: %v; want ErrNoAgent naming /usr/bin/kata-agent", name, err)
		}
	}
}

// TestExtractErofs: Kata's erofs images (lz4hc) are refused with a way out.
func TestExtractErofs(t *testing.T) {
	img := kataImage(t, guestRoot(t, ""), false)
	f, err := os.OpenFile(img, os.O_RDWR, 0)
	must(t, err)
	must(t, binaryWrite(f, mib+1024, binary.LittleEndian.AppendUint32(nil, 0xe0f5e1e2)))
	must(t, binaryWrite(f, mib+1024+56, []byte{0, 0})) // no ext4 magic left
	must(t, f.Close())
	_, err = Extract(img, filepath.Join(t.TempDir(), "kata-agent"))
	if err == nil || !strings.Contains(err.Error(), "holds erofs") || !strings.Contains(err.Error(), "fsck.erofs --extract") {
		t.Errorf("erofs partition: %v; want an error that says erofs and how to extract it", err)
	}
}

func TestExtractNotAnImage(t *testing.T) {
	p := filepath.Join(t.TempDir(), "config.toml")
	must(t, os.WriteFile(p, []byte("[hypervisor.qemu]\n"), 0o644))
	if _, err := Extract(p, filepath.Join(t.TempDir(), "a")); err == nil || !strings.Contains(err.Error(), "neither a disk image") {
		t.Errorf("a text file: %v", err)
	}
}

func TestVersionFails(t *testing.T) {
	dir := t.TempDir()
	for name, script := range map[string]string{"fails": "#!/bin/sh\nexit 3\n", "silent": "#!/bin/sh\n", "not executable": ""} {
		p := filepath.Join(dir, strings.ReplaceAll(name, " ", "-"))
		mode := os.FileMode(0o755)
		if script == "" {
			mode = 0o644
		}
		must(t, os.WriteFile(p, []byte(script), mode))
		if v, err := Version(context.Background(), p); err == nil {
			t.Errorf("%s: version %q, want an error", name, v)
		}
	}
}

func binaryWrite(f *os.File, off int64, b []byte) error {
	_, err := f.WriteAt(b, off)
	return err
}
