package baseline

import (
	"archive/tar"
	"bytes"
	"github.com/allox-os/allox/internal/testenv"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// need fails in CI and skips elsewhere when a host tool or file is missing.
func need(t *testing.T, path, install string) {
	t.Helper()
	testenv.Tool(t, path, install)
}

func TestParseDepends(t *testing.T) {
	out := "linux-image-amd64\n  Depends: linux-image-6.1.0-57-amd64\n  Recommends: firmware\n"
	if got, err := parseDepends([]byte(out)); err != nil || got != "linux-image-6.1.0-57-amd64" {
		t.Errorf("parseDepends = %q, %v", got, err)
	}
	if _, err := parseDepends([]byte("linux-image-amd64\n")); err == nil || !strings.Contains(err.Error(), "apt-get update") {
		t.Errorf("parseDepends(no deps) = %v; want a hint to run apt-get update", err)
	}
}

func TestCopyVmlinuz(t *testing.T) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range []struct{ name, body string }{
		{"./boot/config-6.1.0-57-amd64", "CONFIG_X=y"},
		{"./lib/modules/6.1.0-57-amd64/vmlinuz-decoy", "no"},
		{"./boot/vmlinuz-6.1.0-57-amd64", "kernel bytes"},
	} {
		tw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.body)), Typeflag: tar.TypeReg})
		tw.Write([]byte(f.body))
	}
	tw.Close()
	dir := t.TempDir()
	path, err := copyVmlinuz(tar.NewReader(&buf), dir)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(path); filepath.Base(path) != "vmlinuz-6.1.0-57-amd64" || string(got) != "kernel bytes" {
		t.Errorf("copyVmlinuz = %s holding %q", path, got)
	}
	if cached(dir) != path {
		t.Errorf("cached(%s) = %q; want %s", dir, cached(dir), path)
	}
	leftovers, _ := filepath.Glob(filepath.Join(dir, ".vmlinuz-*"))
	if len(leftovers) != 0 {
		t.Errorf("temporary files left: %v", leftovers)
	}
}

// TestWriteInitramfs checks the archive with the reference tool, cpio(1).
func TestWriteInitramfs(t *testing.T) {
	need(t, Busybox, "apt-get install busybox-static")
	need(t, "cpio", "apt-get install cpio")
	var a, b bytes.Buffer
	if err := WriteInitramfs(&a, Busybox); err != nil {
		t.Fatal(err)
	}
	if err := WriteInitramfs(&b, Busybox); err != nil || !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Fatalf("two writes differ (err %v)", err)
	}
	dir := t.TempDir()
	cmd := exec.Command("cpio", "-i", "--make-directories", "--quiet")
	cmd.Dir, cmd.Stdin = dir, bytes.NewReader(a.Bytes())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("cpio -i: %v\n%s", err, out)
	}
	list := exec.Command("cpio", "-t", "--quiet")
	list.Stdin = bytes.NewReader(a.Bytes())
	out, err := list.Output()
	if err != nil {
		t.Fatalf("cpio -t: %v", err)
	}
	if diff := cmp.Diff("bin\nbin/busybox\ndev\ninit\nproc\nsys\n", string(out)); diff != "" {
		t.Errorf("cpio -t (-want +got):\n%s", diff)
	}
	want, _ := os.ReadFile(Busybox)
	got, _ := os.ReadFile(filepath.Join(dir, "bin/busybox"))
	if !bytes.Equal(want, got) {
		t.Error("bin/busybox differs from " + Busybox)
	}
	init, _ := os.ReadFile(filepath.Join(dir, "init"))
	if fi, err := os.Stat(filepath.Join(dir, "init")); err != nil || fi.Mode().Perm()&0o111 == 0 || !strings.Contains(string(init), ReadyMarker) {
		t.Errorf("init: %v %v; want an executable script printing %s:\n%s", fi.Mode(), err, ReadyMarker, init)
	}
}

func TestWriteInitramfsNeedsStaticBusybox(t *testing.T) {
	if err := WriteInitramfs(new(bytes.Buffer), "/etc/hostname"); err == nil || !strings.Contains(err.Error(), "busybox-static") {
		t.Errorf("WriteInitramfs(not ELF) = %v; want a hint to install busybox-static", err)
	}
	for _, dyn := range []string{"/bin/dash", "/usr/bin/env"} {
		if _, err := os.Stat(dyn); err == nil {
			if err := WriteInitramfs(new(bytes.Buffer), dyn); err == nil || !strings.Contains(err.Error(), "dynamically linked") {
				t.Errorf("WriteInitramfs(%s) = %v; want it refused as dynamic", dyn, err)
			}
			return
		}
	}
	t.Log("no dynamic binary to try; checked only a non-ELF file")
}
