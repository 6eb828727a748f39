package rootfs

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// NpmPackage is one tarball of the npm registry, pinned by exact version and the registry's
// sha512 integrity, and the files of it (relative to its package/ directory) to extract.
type NpmPackage struct {
	Package, Version, Integrity string
	Files                       []string
}

// FetchNpm gets p's tarball through the npm client (npm pack, scripts off) into
// CACHE/npm/<sha512>.tgz, refuses it unless its sha512 is p.Integrity, and extracts p.Files into
// CACHE/npm/<sha512>/, which it returns. Both are keyed by the content: a second call with the
// same integrity asks the registry nothing, and a tarball that no longer matches is fetched again.
func FetchNpm(ctx context.Context, cacheDir string, p NpmPackage, log io.Writer) (dir, tarball string, err error) {
	sum, err := integritySum(p.Integrity)
	if err != nil {
		return "", "", err
	}
	root := filepath.Join(cacheDir, "npm")
	key := hex.EncodeToString(sum)
	dir, tarball = filepath.Join(root, key), filepath.Join(root, key+".tgz")
	if _, err := os.Stat(tarball); err == nil && haveAll(dir, p.Files) {
		return dir, tarball, nil
	}
	if !bytes.Equal(fileSHA512(tarball), sum) {
		fmt.Fprintf(log, "npm pack %s@%s\n", p.Package, p.Version)
		if err := npmPack(ctx, root, p, tarball, sum); err != nil {
			return "", "", err
		}
	}
	if err := extractNpm(tarball, dir, p.Files); err != nil {
		return "", "", fmt.Errorf("%s@%s: %w", p.Package, p.Version, err)
	}
	return dir, tarball, nil
}

func integritySum(integrity string) ([]byte, error) {
	b64, ok := strings.CutPrefix(integrity, "sha512-")
	sum, err := base64.StdEncoding.DecodeString(b64)
	if !ok || err != nil || len(sum) != sha512.Size {
		return nil, fmt.Errorf("integrity %q is not \"sha512-\" and base64 of 64 bytes", integrity)
	}
	return sum, nil
}

func fileSHA512(path string) []byte {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	h := sha512.New()
	if _, err := io.Copy(h, f); err != nil {
		return nil
	}
	return h.Sum(nil)
}

func haveAll(dir string, files []string) bool {
	for _, f := range files {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || !st.Mode().IsRegular() {
			return false
		}
	}
	return true
}

// npmPack runs npm pack in a scratch directory (with its own npm cache beside ours) and moves the
// tarball into place only when its sha512 is the pinned one.
func npmPack(ctx context.Context, root string, p NpmPackage, tarball string, want []byte) error {
	npm, err := exec.LookPath("npm")
	if err != nil {
		return fmt.Errorf("npm package %s: the npm client is needed to fetch it (apt-get install npm): %w", p.Package, err)
	}
	tmp, err := os.MkdirTemp(mkdirAll(root), ".pack-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	cmd := exec.CommandContext(ctx, npm, "pack", "--silent", "--ignore-scripts", "--pack-destination", tmp, p.Package+"@"+p.Version)
	cmd.Dir = tmp
	cmd.Env = append(os.Environ(), "npm_config_cache="+filepath.Join(root, "npm-cache"), "npm_config_update_notifier=false")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("npm pack %s@%s: %w: %s", p.Package, p.Version, err, strings.TrimSpace(stderr.String()))
	}
	got, _ := filepath.Glob(filepath.Join(tmp, "*.tgz"))
	if len(got) != 1 {
		return fmt.Errorf("npm pack %s@%s left %d tarballs, want 1", p.Package, p.Version, len(got))
	}
	if sum := fileSHA512(got[0]); !bytes.Equal(sum, want) {
		return fmt.Errorf("npm package %s@%s: the registry's tarball has integrity sha512-%s, the spec pins %s; check the version and integrity (npm view %s@%s dist.integrity)",
			p.Package, p.Version, base64.StdEncoding.EncodeToString(sum), "sha512-"+base64.StdEncoding.EncodeToString(want), p.Package, p.Version)
	}
	return os.Rename(got[0], tarball)
}

func mkdirAll(dir string) string {
	_ = os.MkdirAll(dir, 0o755)
	return dir
}

// extractNpm writes the named files of the tarball into dir (replaced whole, atomically).
func extractNpm(tarball, dir string, files []string) error {
	f, err := os.Open(tarball)
	if err != nil {
		return err
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), ".extract-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	want := map[string]bool{}
	for _, name := range files {
		want[name] = true
	}
	var executables []string
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("read %s: %w", filepath.Base(tarball), err)
		}
		name, ok := strings.CutPrefix(h.Name, "package/")
		if !ok || h.Typeflag != tar.TypeReg {
			continue
		}
		if h.Mode&0o111 != 0 {
			executables = append(executables, name)
		}
		if !want[name] {
			continue
		}
		delete(want, name)
		if err := writeExtracted(filepath.Join(tmp, name), tr); err != nil {
			return err
		}
	}
	if len(want) > 0 {
		missing := slices.Sorted(func(yield func(string) bool) {
			for k := range want {
				if !yield(k) {
					return
				}
			}
		})
		return fmt.Errorf("the package has no file %s; its executable files are %s", strings.Join(missing, ", "), strings.Join(executables, ", "))
	}
	_ = os.RemoveAll(dir)
	return os.Rename(tmp, dir)
}

func writeExtracted(path string, r io.Reader) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	out, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, r); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
