// Package baseline is the reference boot that the boot benchmark measures the appliance against:
// Debian's stock kernel for this release (package linux-image-amd64) with an initramfs that holds
// only a static busybox, whose /init prints ReadyMarker and powers the VM off.
package baseline

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/allox-os/allox/internal/artifact"
)

// ReadyMarker is the console line the baseline /init prints once userspace runs.
const ReadyMarker = "ALLOX-BASELINE-READY"

const metaPackage = "linux-image-amd64"

// CacheDir is ${ALLOX_CACHE:-/var/cache/allox}/baseline, outside the checkout.
func CacheDir() string { return filepath.Join(artifact.CacheDir(), "baseline") }

// Kernel returns the path of Debian's vmlinuz in dir. On first use it resolves linux-image-amd64
// to this release's kernel package, fetches it with `apt-get download` and extracts only
// /boot/vmlinuz-* from it (the modules are not needed: the baseline loads none).
func Kernel(ctx context.Context, dir string) (string, error) {
	if k := cached(dir); k != "" {
		return k, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("baseline cache: %w (set ALLOX_CACHE to a writable directory)", err)
	}
	pkg, err := kernelPackage(ctx)
	if err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(dir, ".download-")
	if err != nil {
		return "", fmt.Errorf("baseline cache: %w", err)
	}
	defer os.RemoveAll(tmp)
	cmd := exec.CommandContext(ctx, "apt-get", "download", pkg)
	cmd.Dir = tmp
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("apt-get download %s: %w\n%s", pkg, err, out)
	}
	debs, _ := filepath.Glob(filepath.Join(tmp, "*.deb"))
	if len(debs) != 1 {
		return "", fmt.Errorf("apt-get download %s left %d .deb files, want 1", pkg, len(debs))
	}
	return extractVmlinuz(ctx, debs[0], dir)
}

// cached returns the newest vmlinuz-* already in dir, or "".
func cached(dir string) string {
	ks, _ := filepath.Glob(filepath.Join(dir, "vmlinuz-*"))
	if len(ks) == 0 {
		return ""
	}
	slices.Sort(ks)
	return ks[len(ks)-1]
}

// kernelPackage resolves the metapackage to the versioned image package, e.g.
// linux-image-6.1.0-57-amd64.
func kernelPackage(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "apt-cache", "depends", metaPackage).Output()
	if err != nil {
		return "", fmt.Errorf("apt-cache depends %s: %w (run apt-get update first)", metaPackage, err)
	}
	return parseDepends(out)
}

func parseDepends(out []byte) (string, error) {
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		dep, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "Depends: ")
		if ok && strings.HasPrefix(dep, "linux-image-") {
			return dep, nil
		}
	}
	return "", fmt.Errorf("apt-cache depends %s names no linux-image-* package (run apt-get update)", metaPackage)
}

// extractVmlinuz copies ./boot/vmlinuz-* out of the package's data archive (dpkg-deb
// --fsys-tarfile) into dir, atomically.
func extractVmlinuz(ctx context.Context, deb, dir string) (string, error) {
	cmd := exec.CommandContext(ctx, "dpkg-deb", "--fsys-tarfile", deb)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	data, err := cmd.StdoutPipe()
	if err != nil {
		return "", err
	}
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("dpkg-deb: %w", err)
	}
	path, findErr := copyVmlinuz(tar.NewReader(data), dir)
	io.Copy(io.Discard, data)
	if err := cmd.Wait(); err != nil {
		return "", fmt.Errorf("dpkg-deb --fsys-tarfile %s: %w\n%s", deb, err, stderr.Bytes())
	}
	return path, findErr
}

func copyVmlinuz(tr *tar.Reader, dir string) (string, error) {
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return "", errors.New("no ./boot/vmlinuz-* in the kernel package")
		}
		if err != nil {
			return "", fmt.Errorf("read kernel package: %w", err)
		}
		name := filepath.Base(h.Name)
		if filepath.Dir(filepath.Clean(h.Name)) != "boot" || !strings.HasPrefix(name, "vmlinuz-") || h.Typeflag != tar.TypeReg {
			continue
		}
		tmp, err := os.CreateTemp(dir, ".vmlinuz-")
		if err != nil {
			return "", err
		}
		defer os.Remove(tmp.Name())
		if _, err := io.Copy(tmp, tr); err != nil {
			tmp.Close()
			return "", fmt.Errorf("extract %s: %w", h.Name, err)
		}
		if err := tmp.Close(); err != nil {
			return "", err
		}
		dst := filepath.Join(dir, name)
		if err := os.Rename(tmp.Name(), dst); err != nil {
			return "", err
		}
		return dst, os.Chmod(dst, 0o644)
	}
}
