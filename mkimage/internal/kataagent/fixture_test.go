package kataagent

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/allox-os/allox/internal/testenv"
	"github.com/allox-os/allox/rootfs/dax"
)

// standinPkg is the stand-in kata-agent of the tests: the real one is Rust and can be neither
// built nor downloaded here (see qemu-tests/internal/standin).
const standinPkg = "github.com/allox-os/allox/qemu-tests/internal/standin/kata-agent"

var (
	standinOnce sync.Once
	standinBin  string
	standinErr  error
)

// standin builds the stand-in once per test binary, as a static executable.
func standin(t *testing.T) string {
	t.Helper()
	standinOnce.Do(func() {
		dir, err := os.MkdirTemp("", "standin-")
		if err != nil {
			standinErr = err
			return
		}
		standinBin = filepath.Join(dir, "kata-agent")
		cmd := exec.Command("go", "build", "-trimpath", "-o", standinBin, standinPkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			standinErr = &buildError{err: err, out: string(out)}
		}
	})
	if standinErr != nil {
		t.Fatal(standinErr)
	}
	return standinBin
}

type buildError struct {
	err error
	out string
}

func (e *buildError) Error() string { return "go build the stand-in: " + e.err.Error() + "\n" + e.out }

// guestRoot lays out a root like Kata's osbuilder makes: merged /usr with /bin -> usr/bin, and the
// agent at /usr/bin/kata-agent as a symlink to the binary under /opt (Kata's image may have one).
func guestRoot(t *testing.T, agent string) string {
	t.Helper()
	root := filepath.Join(t.TempDir(), "rootfs")
	for _, d := range []string{"usr/bin", "usr/lib/systemd/system", "opt/kata/bin", "etc"} {
		must(t, os.MkdirAll(filepath.Join(root, d), 0o755))
	}
	must(t, os.Symlink("usr/bin", filepath.Join(root, "bin")))
	must(t, os.WriteFile(filepath.Join(root, "etc/resolv.conf"), nil, 0o644))
	if agent != "" {
		data, err := os.ReadFile(agent)
		must(t, err)
		must(t, os.WriteFile(filepath.Join(root, "opt/kata/bin/kata-agent"), data, 0o755))
		must(t, os.Symlink("/opt/kata/bin/kata-agent", filepath.Join(root, "usr/bin/kata-agent")))
	}
	return root
}

// kataImage is kata-containers.img made as Kata's image_builder.sh makes it: an MBR disk with one
// Linux partition at 1 MiB holding ext4 (mkfs.ext4 -b 4096), then, with nvdimm, the 2 MiB DAX
// header in front (partition 1 at 3 MiB).
func kataImage(t *testing.T, root string, nvdimm bool) string {
	t.Helper()
	mkfs := testenv.Tool(t, "mkfs.ext4", "apt-get install e2fsprogs")
	sfdisk := testenv.Tool(t, "sfdisk", "apt-get install fdisk")
	dir := t.TempDir()
	fsImg, img := filepath.Join(dir, "p1.ext4"), filepath.Join(dir, "kata-containers.img")
	run(t, "", mkfs, "-q", "-F", "-b", "4096", "-d", root, fsImg, "32M")
	fsData, err := os.ReadFile(fsImg)
	must(t, err)
	f, err := os.Create(img)
	must(t, err)
	_, err = f.WriteAt(fsData, mib)
	must(t, err)
	must(t, f.Truncate(int64(len(fsData))+2*mib))
	must(t, f.Close())
	run(t, "label: dos\nstart=2048, size=65536, type=83\n", sfdisk, "-q", img)
	if nvdimm {
		must(t, dax.AddHeader(img, dax.Options{Seed: []byte("kataagent test"), SizeAlign: 2 * mib}))
	}
	return img
}

// kataInitrd is kata-containers-initrd.img as initrd_builder.sh makes it:
// (cd ROOTFS && find . | cpio -H newc -o | gzip -9); compress "zstd" compresses the same cpio with
// zstd instead (the Go encoder: no zstd tool needed).
func kataInitrd(t *testing.T, root, compress string) string {
	t.Helper()
	testenv.Tool(t, "cpio", "apt-get install cpio")
	dir := t.TempDir()
	img, raw := filepath.Join(dir, "kata-containers-initrd.img"), filepath.Join(dir, "initrd.cpio")
	run(t, "", "sh", "-c", `cd "$1" && find . | cpio --quiet -H newc -o > "$2"`, "sh", root, raw)
	data, err := os.ReadFile(raw)
	must(t, err)
	var buf bytes.Buffer
	switch compress {
	case "gzip":
		zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
		_, err = zw.Write(data)
		must(t, errors.Join(err, zw.Close()))
	case "zstd":
		zw, err := zstd.NewWriter(&buf)
		must(t, err)
		_, err = zw.Write(data)
		must(t, errors.Join(err, zw.Close()))
	default:
		t.Fatalf("BUG: compress %q", compress)
	}
	must(t, os.WriteFile(img, buf.Bytes(), 0o644))
	return img
}

func run(t *testing.T, stdin, name string, args ...string) {
	t.Helper()
	cmd := exec.CommandContext(context.Background(), name, args...)
	cmd.Stdin = strings.NewReader(stdin)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
