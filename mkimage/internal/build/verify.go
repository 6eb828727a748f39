package build

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"

	"github.com/allox-os/allox/internal/artifact"
)

// Finding is one artifact of an output directory that disagrees with its manifest.
type Finding struct {
	Artifact string
	Problem  string
}

func (f Finding) String() string { return f.Artifact + ": " + f.Problem }

// Verify rechecks dir against dir/manifest.json: every listed output must exist with its recorded
// size and sha256, every artifact in dir (OutputFiles) must be listed, and the SBOM must be the one
// the manifest renders to. No findings means the directory is exactly what the build wrote.
func Verify(dir string) ([]Finding, error) {
	p, err := ReadProvenance(dir)
	if err != nil {
		return nil, err
	}
	var findings []Finding
	listed := map[string]bool{}
	for _, want := range p.Outputs {
		listed[want.Path] = true
		if f, ok := checkOutput(dir, want); !ok {
			findings = append(findings, f)
		}
	}
	present, err := OutputFiles(dir)
	if err != nil {
		return nil, err
	}
	for _, name := range present {
		if !listed[name] {
			findings = append(findings, Finding{name, "not listed in " + artifact.Manifest})
		}
	}
	if f, ok := checkSBOM(dir, p); !ok {
		findings = append(findings, f)
	}
	return findings, nil
}

// checkOutput compares one listed output with the file in dir.
func checkOutput(dir string, want Output) (Finding, bool) {
	got, err := hashOutput(dir, want.Path, nil)
	switch {
	case os.IsNotExist(err):
		return Finding{want.Path, "missing (listed in " + artifact.Manifest + ")"}, false
	case err != nil:
		return Finding{want.Path, err.Error()}, false
	case got.SHA256 != want.SHA256:
		return Finding{want.Path, fmt.Sprintf("changed: %s records sha256 %s (%d bytes), the file has %s (%d bytes)",
			artifact.Manifest, want.SHA256, want.Size, got.SHA256, got.Size)}, false
	}
	return Finding{}, true
}

// checkSBOM renders the SBOM from the manifest and compares it with the file.
func checkSBOM(dir string, p *Provenance) (Finding, bool) {
	have, err := os.ReadFile(filepath.Join(dir, SBOMName))
	switch {
	case os.IsNotExist(err) && listedOutput(p, SBOMName):
		return Finding{}, true // reported as a missing output
	case os.IsNotExist(err):
		return Finding{SBOMName, "missing, and " + artifact.Manifest + " lists none: rebuild with this mkimage"}, false
	case err != nil:
		return Finding{SBOMName, err.Error()}, false
	}
	want, err := EncodeSBOM(p)
	if err != nil {
		return Finding{SBOMName, err.Error()}, false
	}
	if bytes.Equal(have, want) {
		return Finding{}, true
	}
	return Finding{SBOMName, "does not match " + artifact.Manifest + ": " + firstLineDiff(want, have)}, false
}

func listedOutput(p *Provenance, name string) bool {
	for _, o := range p.Outputs {
		if o.Path == name {
			return true
		}
	}
	return false
}

// firstLineDiff names the first line where have departs from what the manifest renders (want).
func firstLineDiff(want, have []byte) string {
	w, h := bytes.Split(want, []byte("\n")), bytes.Split(have, []byte("\n"))
	for i := 0; i < max(len(w), len(h)); i++ {
		var a, b []byte
		if i < len(w) {
			a = w[i]
		}
		if i < len(h) {
			b = h[i]
		}
		if !bytes.Equal(a, b) {
			return fmt.Sprintf("line %d is %q, the manifest renders %q", i+1, b, a)
		}
	}
	return "same lines, different bytes"
}
