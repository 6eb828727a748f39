package kernel

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"

	"github.com/allox-os/allox/internal/artifact"
)

// Source pins the kernel source: a Debian linux-source package at an exact version, or a local
// tarball. SHA256 is the hash of the source tarball either way.
type Source struct {
	DebianPackage string
	Version       string
	Tarball       string
	SHA256        string
}

func (s Source) String() string {
	if s.Tarball != "" {
		return s.Tarball
	}
	return s.DebianPackage + "=" + s.Version
}

// Fetch returns the path of the verified source tarball, downloading the Debian package into
// cacheDir/sources when needed. A hash mismatch is an error that names both hashes.
func (s Source) Fetch(ctx context.Context, cacheDir string) (string, error) {
	if s.Tarball != "" {
		return s.Tarball, verify(s.Tarball, s.SHA256)
	}
	dir := filepath.Join(cacheDir, "sources")
	cached := filepath.Join(dir, s.SHA256+".tar.xz")
	if _, err := os.Stat(cached); err == nil {
		return cached, verify(cached, s.SHA256)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(dir, "download-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	get := exec.CommandContext(ctx, "apt-get", "download", s.DebianPackage+"="+s.Version)
	get.Dir = tmp
	if out, err := get.CombinedOutput(); err != nil {
		return "", fmt.Errorf("download %s: %w: %s (run apt-get update; if the version has left the archive, pin a newer one in kernel.source)",
			s, err, strings.TrimSpace(string(out)))
	}
	debs, _ := filepath.Glob(filepath.Join(tmp, "*.deb"))
	if len(debs) != 1 {
		return "", fmt.Errorf("download %s: expected one .deb, found %d", s, len(debs))
	}
	part := filepath.Join(tmp, "source.tar.xz")
	if err := extractSourceTarball(ctx, debs[0], s.DebianPackage, part); err != nil {
		return "", err
	}
	if err := verify(part, s.SHA256); err != nil {
		return "", err
	}
	return cached, os.Rename(part, cached)
}

// extractSourceTarball copies usr/src/<pkg>.tar.xz out of a .deb's data archive.
func extractSourceTarball(ctx context.Context, deb, pkg, dst string) error {
	cmd := exec.CommandContext(ctx, "dpkg-deb", "--fsys-tarfile", deb)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("dpkg-deb: %w", err)
	}
	want := "usr/src/" + pkg + ".tar.xz"
	found := false
	tr := tar.NewReader(stdout)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("read %s: %w", deb, err)
		}
		if path.Clean(strings.TrimPrefix(h.Name, "./")) != want {
			continue
		}
		f, err := os.Create(dst)
		if err != nil {
			return err
		}
		_, err = io.Copy(f, tr)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("extract %s: %w", want, err)
		}
		found = true
	}
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("dpkg-deb --fsys-tarfile %s: %w", deb, err)
	}
	if !found {
		return fmt.Errorf("%s holds no %s", filepath.Base(deb), want)
	}
	return nil
}

func verify(file, want string) error {
	got, err := HashFile(file)
	if err != nil {
		return err
	}
	if got != want {
		return fmt.Errorf("kernel source %s: sha256 is %s, the spec pins %s (update kernel.source.sha256 only if you meant to change the source)", file, got, want)
	}
	return nil
}

// HashFile returns the hex sha256 of a file (artifact.SHA256File).
func HashFile(p string) (string, error) { return artifact.SHA256File(p) }
