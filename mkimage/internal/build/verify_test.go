package build

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/allox-os/allox/internal/artifact"
)

// outputDir writes a small output directory and its manifest and SBOM with the functions
// writeProvenance uses.
func outputDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for name, data := range map[string]string{
		"bzImage": "kernel", "boot.json": "{}\n", "kata/config.d/50-allox.toml": "[hypervisor.qemu]\n",
		"workspace.img": "the store disk make boot keeps", "allox-deploy.yaml": "written by mkimage push", "process-tree/manifest.json": "{}\n", ".work-1/x": "scratch",
	} {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	p := testProvenance(t)
	var err error
	if p.Outputs, err = hashOutputs(dir, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := writeSBOM(dir, p, nil); err != nil {
		t.Fatal(err)
	}
	data, err := p.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, artifact.Manifest), data, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestVerify(t *testing.T) {
	base := outputDir(t)
	if f, err := Verify(base); err != nil || len(f) != 0 {
		t.Fatalf("a fresh output directory: findings %v, %v", f, err)
	}
	for _, tc := range []struct {
		name   string
		change func(dir string) error
		want   string
	}{
		{"flipped byte", func(dir string) error { return flipByte(filepath.Join(dir, "bzImage"), 2) },
			"bzImage: changed: manifest.json records sha256 "},
		{"removed", func(dir string) error { return os.Remove(filepath.Join(dir, "kata/config.d/50-allox.toml")) },
			"kata/config.d/50-allox.toml: missing (listed in manifest.json)"},
		{"unlisted", func(dir string) error {
			return os.WriteFile(filepath.Join(dir, "kata/config.d/60-extra.toml"), nil, 0o644)
		},
			"kata/config.d/60-extra.toml: not listed in manifest.json"},
		{"SBOM edited", func(dir string) error { return replaceIn(filepath.Join(dir, SBOMName), "5.2.15-2+b7", "5.2.15-2+b8") },
			"sbom.spdx.json: does not match manifest.json: line "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := copyTree(t, base)
			if err := tc.change(dir); err != nil {
				t.Fatal(err)
			}
			findings, err := Verify(dir)
			if err != nil {
				t.Fatal(err)
			}
			artifact, _, _ := strings.Cut(tc.want, ":")
			found := false
			for _, f := range findings {
				found = found || strings.HasPrefix(f.String(), tc.want)
				if f.Artifact != artifact {
					t.Errorf("finding %q names another artifact than %s", f, artifact)
				}
			}
			if !found {
				t.Errorf("findings %v, want one starting with %q", findings, tc.want)
			}
		})
	}
}

func flipByte(p string, off int) error {
	data, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	data[off] ^= 0xff
	return os.WriteFile(p, data, 0o644)
}

func replaceIn(p, old, new string) error {
	data, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	if !strings.Contains(string(data), old) {
		return os.ErrNotExist
	}
	return os.WriteFile(p, []byte(strings.Replace(string(data), old, new, 1)), 0o644)
}

func copyTree(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	err := filepath.Walk(src, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		r, _ := filepath.Rel(src, p)
		if fi.IsDir() {
			return os.MkdirAll(filepath.Join(dst, r), 0o755)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, r), data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}
