package build

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/allox-os/allox/internal/artifact"
	"github.com/allox-os/allox/kernel"
	"github.com/allox-os/allox/rootfs"
)

// Provenance is out/manifest.json: the sha256 of every input and every output of a build, the
// versions of everything that went into the image and of the tools that made it.
type Provenance struct {
	Image           ImageID          `json:"image"`
	SourceDateEpoch int64            `json:"source_date_epoch"`
	Toolchain       []Tool           `json:"toolchain"`
	Kernel          KernelSource     `json:"kernel_source"`
	KernelBuildKey  string           `json:"kernel_build_key"`
	Inputs          []Input          `json:"inputs"`
	Packages        []rootfs.Package `json:"debian_packages"`
	GoBinaries      []GoBinary       `json:"go_binaries"`
	KataAgent       *KataAgent       `json:"kata_agent,omitempty"`
	Source          *Source          `json:"source,omitempty"`
	Outputs         []Output         `json:"outputs"`

	sum func(string) (string, error) // the build's sha256, from its stat-keyed cache
}

// ImageID names the image.
type ImageID struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

// KernelSource is the kernel's source package (or tarball) and the sha256 of its tarball.
type KernelSource struct {
	DebianPackage string `json:"debian_package,omitempty"`
	Version       string `json:"version,omitempty"`
	Tarball       string `json:"tarball,omitempty"`
	SHA256        string `json:"sha256"`
}

// Input is one thing the build read.
type Input struct {
	Kind   string `json:"kind"` // spec, fragment, patch, allowlist, kernel-source, debian-userland, go-binary, daemon-file, kata-agent-binary, kata-agent-from_image
	Name   string `json:"name"`
	Detail string `json:"detail,omitempty"`
	SHA256 string `json:"sha256"`
}

// Output is one artifact in the output directory.
type Output struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

func newProvenance(opt Options) *Provenance {
	p := &Provenance{Image: ImageID{opt.Spec.Name, opt.Spec.Version}, SourceDateEpoch: opt.Epoch}
	sum := sha256.Sum256(opt.SpecText)
	p.Inputs = append(p.Inputs, Input{Kind: "spec", Name: rel(opt.ModuleRoot, opt.Spec.File), SHA256: hex.EncodeToString(sum[:])})
	src := opt.Spec.Kernel.Source
	p.Kernel = KernelSource{DebianPackage: src.DebianPackage, Version: src.Version, SHA256: src.SHA256}
	if src.Tarball != "" {
		p.Kernel.Tarball = rel(opt.ModuleRoot, src.Tarball)
	}
	p.Inputs = append(p.Inputs, Input{Kind: "kernel-source", Name: KernelSpec(opt.Spec, 0, 0).Source.String(), SHA256: src.SHA256})
	return p
}

// SpecSHA256 is the sha256 of the image spec, from the inputs.
func (p *Provenance) SpecSHA256() string {
	for _, in := range p.Inputs {
		if in.Kind == "spec" {
			return in.SHA256
		}
	}
	return ""
}

// addInput hashes a file the build read.
func (p *Provenance) addInput(kind, name, detail, file string) error {
	hash := p.sum
	if hash == nil {
		hash = kernel.HashFile
	}
	sum, err := hash(file)
	if err != nil {
		return err
	}
	p.Inputs = append(p.Inputs, Input{Kind: kind, Name: name, Detail: detail, SHA256: sum})
	return nil
}

func rel(root, p string) string {
	if r, err := filepath.Rel(root, p); err == nil && !strings.HasPrefix(r, "..") {
		return filepath.ToSlash(r)
	}
	return p
}

// writeProvenance records the kernel inputs, the packages, the Go modules and the toolchain, writes
// the SBOM, hashes every output (the SBOM among them) and writes manifest.json last.
func writeProvenance(ctx context.Context, s *state) error {
	p := s.prov
	p.KernelBuildKey = s.kernel.Key
	if err := p.addKernelInputs(s.opt.ModuleRoot, s); err != nil {
		return err
	}
	sort.SliceStable(p.Inputs, func(i, j int) bool { return p.Inputs[i].Kind+p.Inputs[i].Name < p.Inputs[j].Kind+p.Inputs[j].Name })
	p.Packages = s.packages
	var err error
	if p.GoBinaries, err = readGoBinaries(s.bins); err != nil {
		return err
	}
	if p.Toolchain, err = s.toolchain(ctx); err != nil {
		return err
	}
	if p.Source, err = sourceTree(ctx, s.opt.ModuleRoot); err != nil {
		return err
	}
	if p.Outputs, err = hashOutputs(s.out, s.hash); err != nil {
		return err
	}
	sbomChanged, err := writeSBOM(s.out, p, s.hash)
	if err != nil {
		return err
	}
	data, err := p.Encode()
	if err != nil {
		return err
	}
	changed, err := writeIfChanged(filepath.Join(s.out, artifact.Manifest), data, 0o644)
	if err != nil {
		return err
	}
	if changed || sbomChanged {
		s.ran("wrote %s and %s", artifact.Manifest, SBOMName)
	} else {
		s.reused("%s and %s unchanged", artifact.Manifest, SBOMName)
	}
	return nil
}

// writeIfChanged writes data to p unless p already holds exactly data with mode, so that an
// unchanged output keeps its inode, its times and its place in the hash cache.
func writeIfChanged(p string, data []byte, mode os.FileMode) (bool, error) {
	if old, err := os.ReadFile(p); err == nil && bytes.Equal(old, data) {
		if st, err := os.Stat(p); err == nil && st.Mode().Perm() == mode {
			return false, nil
		}
	}
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return false, err
	}
	if err := os.Chmod(tmp, mode); err != nil { // WriteFile keeps an existing file's mode
		return false, err
	}
	return true, os.Rename(tmp, p)
}

// writeSBOM writes the SBOM (which names the other outputs' hashes) and adds its own hash.
func writeSBOM(dir string, p *Provenance, sum func(string) (string, error)) (bool, error) {
	sbom, err := EncodeSBOM(p)
	if err != nil {
		return false, err
	}
	changed, err := writeIfChanged(filepath.Join(dir, SBOMName), sbom, 0o644)
	if err != nil {
		return false, err
	}
	o, err := hashOutput(dir, SBOMName, sum)
	if err != nil {
		return false, err
	}
	outs := []Output{o}
	for _, x := range p.Outputs {
		if x.Path != SBOMName {
			outs = append(outs, x)
		}
	}
	sort.Slice(outs, func(i, j int) bool { return outs[i].Path < outs[j].Path })
	p.Outputs = outs
	return changed, nil
}

// Encode renders the manifest as indented JSON.
func (p *Provenance) Encode() ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(p); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// ReadProvenance reads dir/manifest.json.
func ReadProvenance(dir string) (*Provenance, error) {
	data, err := os.ReadFile(filepath.Join(dir, artifact.Manifest))
	if err != nil {
		return nil, fmt.Errorf("read provenance manifest: %w (build the image first: mkimage build -out %s)", err, dir)
	}
	var p Provenance
	if err := json.Unmarshal(data, &p); err != nil {
		return nil, fmt.Errorf("decode %s: %w (an older mkimage wrote it? rebuild: mkimage build -out %s)", artifact.Manifest, err, dir)
	}
	return &p, nil
}

// addKernelInputs hashes the fragments, the allow-list, the patch series and its patches.
func (p *Provenance) addKernelInputs(root string, s *state) error {
	img := s.opt.Spec
	for kind, files := range map[string][]string{"fragment": img.Kernel.Fragments, "allowlist": nonEmpty(img.Kernel.Allowlist)} {
		for _, f := range files {
			if err := p.addInput(kind, rel(root, f), "", f); err != nil {
				return err
			}
		}
	}
	patches, err := kernel.ReadSeries(img.Kernel.Patches)
	if err != nil {
		return err
	}
	for _, f := range append(nonEmpty(img.Kernel.Patches), patchPaths(patches)...) {
		if err := p.addInput("patch", rel(root, f), "", f); err != nil {
			return err
		}
	}
	return nil
}

func nonEmpty(s string) []string {
	if s == "" {
		return nil
	}
	return []string{s}
}

func patchPaths(ps []kernel.Patch) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Path)
	}
	return out
}

// indentWriter prefixes every line written through it, for sub-step progress.
type indentWriter struct {
	w   io.Writer
	bol bool
}

func indent(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return &indentWriter{w: w, bol: true}
}

func (iw *indentWriter) Write(p []byte) (int, error) {
	var b bytes.Buffer
	for _, c := range p {
		if iw.bol {
			b.WriteString("    ")
		}
		b.WriteByte(c)
		iw.bol = c == '\n'
	}
	if _, err := iw.w.Write(b.Bytes()); err != nil {
		return 0, err
	}
	return len(p), nil
}
