package build

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"

	"github.com/allox-os/allox/internal/artifact"
	"github.com/allox-os/allox/kernel"
)

// Provenance is out/manifest.json: the sha256 of every input and every output of a build.
type Provenance struct {
	Image           ImageID  `json:"image"`
	SourceDateEpoch int64    `json:"source_date_epoch"`
	Toolchain       []string `json:"toolchain"`
	KernelBuildKey  string   `json:"kernel_build_key"`
	Inputs          []Input  `json:"inputs"`
	Packages        []string `json:"debian_packages"`
	Outputs         []Output `json:"outputs"`
}

// ImageID names the image.
type ImageID struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

// Input is one thing the build read.
type Input struct {
	Kind   string `json:"kind"` // spec, fragment, patch, allowlist, kernel-source, debian-userland, go-binary
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
	p := &Provenance{Image: ImageID{opt.Spec.Name, opt.Spec.Version}, SourceDateEpoch: opt.Epoch,
		Toolchain: []string{runtime.Version()}}
	sum := sha256.Sum256(opt.SpecText)
	p.Inputs = append(p.Inputs, Input{Kind: "spec", Name: rel(opt.ModuleRoot, opt.Spec.File), SHA256: hex.EncodeToString(sum[:])})
	k := opt.Spec.Kernel
	p.Inputs = append(p.Inputs, Input{Kind: "kernel-source", Name: KernelSpec(opt.Spec, 0, 0).Source.String(), SHA256: k.Source.SHA256})
	return p
}

// addInput hashes a file the build read.
func (p *Provenance) addInput(kind, name, detail, file string) error {
	sum, err := kernel.HashFile(file)
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

// writeProvenance records the kernel inputs and hashes every output, then writes manifest.json.
func writeProvenance(ctx context.Context, s *state) error {
	p, img := s.prov, s.opt.Spec
	if tc, err := kernel.Toolchain(); err == nil {
		p.Toolchain = append(p.Toolchain, tc)
	}
	p.KernelBuildKey = s.kernel.Key
	for kind, files := range map[string][]string{"fragment": img.Kernel.Fragments, "allowlist": nonEmpty(img.Kernel.Allowlist)} {
		for _, f := range files {
			if err := p.addInput(kind, rel(s.opt.ModuleRoot, f), "", f); err != nil {
				return err
			}
		}
	}
	patches, err := kernel.ReadSeries(img.Kernel.Patches)
	if err != nil {
		return err
	}
	for _, f := range append(nonEmpty(img.Kernel.Patches), patchPaths(patches)...) {
		if err := p.addInput("patch", rel(s.opt.ModuleRoot, f), "", f); err != nil {
			return err
		}
	}
	sort.SliceStable(p.Inputs, func(i, j int) bool { return p.Inputs[i].Kind+p.Inputs[i].Name < p.Inputs[j].Kind+p.Inputs[j].Name })
	for _, pkg := range s.packages {
		p.Packages = append(p.Packages, pkg.Name+"="+pkg.Version)
	}
	if p.Outputs, err = hashOutputs(s.out); err != nil {
		return err
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(p); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(s.out, artifact.Manifest), buf.Bytes(), 0o644)
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

// hashOutputs hashes the artifacts this build wrote (not whatever else lives in the output
// directory, such as the workspace disk `make boot` keeps there).
func hashOutputs(dir string) ([]Output, error) {
	names := []string{artifact.Kernel, artifact.Vmlinux, artifact.KernelConfig, artifact.Rootfs, artifact.Initramfs, artifact.Boot}
	err := filepath.WalkDir(filepath.Join(dir, artifact.KataDir), func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			names = append(names, rel(dir, p))
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	var outs []Output
	for _, name := range names {
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			return nil, err
		}
		h := sha256.New()
		n, err := io.Copy(h, f)
		f.Close()
		if err != nil {
			return nil, err
		}
		outs = append(outs, Output{Path: name, Size: n, SHA256: hex.EncodeToString(h.Sum(nil))})
	}
	return outs, nil
}

// indentWriter prefixes every line written through it, for sub-step progress.
type indentWriter struct {
	w   io.Writer
	bol bool
}

func indent(w io.Writer) io.Writer { return &indentWriter{w: w, bol: true} }

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
