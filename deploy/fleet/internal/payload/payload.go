// Package payload is what a fleet rollout carries from a build output directory to each node: the
// kernel, the image or initrd the Kata drop-ins name, kata/ (drop-ins, containerd handlers,
// RuntimeClasses, install.sh), manifest.json and the SBOM. It chooses those files and checks each
// against manifest.json's sha256, on the push side (mkimage push) and on the node (allox-deploy)
// alike. It imports no registry client so the node installer stays small.
package payload

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/allox-os/allox/deploy/kata"
	"github.com/allox-os/allox/internal/artifact"
)

// SBOM is the SPDX SBOM mkimage writes beside manifest.json.
const SBOM = "sbom.spdx.json"

// Manifest is the part of manifest.json a rollout reads: the image's name and the sha256 of every
// output. Other keys are ignored (they are mkimage's provenance, not the payload's contract).
type Manifest struct {
	Image struct {
		Name    string `json:"name"`
		Version string `json:"version"`
	} `json:"image"`
	SourceDateEpoch int64    `json:"source_date_epoch"`
	Outputs         []Output `json:"outputs"`
}

// Output is one output file as manifest.json records it.
type Output struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// ReadManifest reads dir/manifest.json.
func ReadManifest(dir string) (*Manifest, error) {
	data, err := os.ReadFile(filepath.Join(dir, artifact.Manifest))
	if err != nil {
		return nil, fmt.Errorf("%s: %w (a build output directory has one: mkimage build -out DIR)", artifact.Manifest, err)
	}
	var m Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("decode %s: %w", artifact.Manifest, err)
	}
	if m.Image.Name == "" {
		return nil, fmt.Errorf("%s: image.name is empty: rebuild with mkimage build", artifact.Manifest)
	}
	return &m, nil
}

func (m *Manifest) output(p string) (Output, bool) {
	for _, o := range m.Outputs {
		if o.Path == p {
			return o, true
		}
	}
	return Output{}, false
}

// Select returns the payload of the build in dir, slash-separated and sorted: manifest.json, the
// SBOM, the attestation when the build is signed, every output under kata/, and the kernel and the image or initrd that kata's Go-runtime
// drop-in names. Each file must match manifest.json, so a changed output is never published.
func Select(dir string) ([]string, *Manifest, error) {
	m, err := ReadManifest(dir)
	if err != nil {
		return nil, nil, err
	}
	files := []string{artifact.Manifest, SBOM}
	if _, err := os.Stat(filepath.Join(dir, artifact.Attestation)); err == nil {
		files = append(files, artifact.Attestation)
	}
	for _, o := range m.Outputs {
		if strings.HasPrefix(o.Path, artifact.KataDir+"/") {
			files = append(files, o.Path)
		}
	}
	assets, err := dropInAssets(dir)
	if err != nil {
		return nil, nil, err
	}
	files = append(files, assets...)
	slices.Sort(files)
	files = slices.Compact(files)
	if errs := m.check(dir, files); len(errs) > 0 {
		return nil, nil, fmt.Errorf("%s: %w: %w (rebuild, or run mkimage verify %s)", dir, ErrMismatch, errors.Join(errs...), dir)
	}
	return files, m, nil
}

// dropInAssets are the output files the Go runtime's drop-in points Kata at (kernel, image, initrd).
func dropInAssets(dir string) ([]string, error) {
	name := path.Join(artifact.KataDir, kata.GoRuntimeDropIn)
	var d struct {
		Hypervisor struct {
			QEMU struct{ Kernel, Image, Initrd string } `toml:"qemu"`
		} `toml:"hypervisor"`
	}
	if _, err := toml.DecodeFile(filepath.Join(dir, filepath.FromSlash(name)), &d); err != nil {
		return nil, fmt.Errorf("%s: %w (build the image with mkimage build)", name, err)
	}
	q := d.Hypervisor.QEMU
	var assets []string
	for _, p := range []string{q.Kernel, q.Image, q.Initrd} {
		if p != "" {
			assets = append(assets, path.Base(p))
		}
	}
	if q.Kernel == "" || len(assets) != 2 {
		return nil, fmt.Errorf("%s: [hypervisor.qemu] must name kernel and one of image or initrd: rebuild with mkimage build", name)
	}
	return assets, nil
}

// ErrMismatch marks a payload file that disagrees with manifest.json.
var ErrMismatch = errors.New("payload does not match manifest.json")

// Verify checks that every file below dir (the payload as it arrived) is a regular file listed in
// dir/manifest.json with its sha256, and that want (the files the payload must carry) are all
// there. The error names each file and what is wrong; it wraps ErrMismatch.
func Verify(dir string, want []string) (*Manifest, error) {
	m, err := ReadManifest(dir)
	if err != nil {
		return nil, err
	}
	var errs []error
	var found []string
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		r, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			errs = append(errs, fmt.Errorf("%s: not a regular file (%s)", r, d.Type()))
			return nil
		}
		found = append(found, filepath.ToSlash(r))
		return nil
	})
	if err != nil {
		return nil, err
	}
	errs = append(errs, m.check(dir, found)...)
	for _, w := range want {
		if !slices.Contains(found, w) {
			errs = append(errs, fmt.Errorf("%s: missing from the payload", w))
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w: %w", ErrMismatch, errors.Join(errs...))
	}
	return m, nil
}

// check hashes each of files (slash-separated, below dir) and names every one that manifest.json
// does not list or records with another sha256. manifest.json itself and the attestation (which
// CheckAttestation checks) are not.
func (m *Manifest) check(dir string, files []string) []error {
	var errs []error
	for _, f := range files {
		if f == artifact.Manifest || f == artifact.Attestation {
			continue
		}
		o, ok := m.output(f)
		if !ok {
			errs = append(errs, fmt.Errorf("%s: not listed in %s", f, artifact.Manifest))
			continue
		}
		got, err := artifact.SHA256File(filepath.Join(dir, filepath.FromSlash(f)))
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", f, err))
			continue
		}
		if got != o.SHA256 {
			errs = append(errs, fmt.Errorf("%s: sha256 %s does not match %s's %s", f, got, artifact.Manifest, o.SHA256))
		}
	}
	return errs
}

// Required are the files a payload in dir cannot do without: manifest.json, the SBOM, install.sh,
// both drop-ins, both containerd snippets, and the kernel and the image or initrd the drop-in names.
func Required(dir string) ([]string, error) {
	assets, err := dropInAssets(dir)
	if err != nil {
		return nil, err
	}
	req := []string{artifact.Manifest, SBOM}
	for _, f := range []string{kata.InstallSh, kata.GoRuntimeDropIn, kata.RuntimeRsDropIn, kata.ContainerdV3, kata.ContainerdV2} {
		req = append(req, path.Join(artifact.KataDir, f))
	}
	return append(req, assets...), nil
}
