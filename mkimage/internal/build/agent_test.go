package build

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cavaliergopher/cpio"

	"github.com/allox-os/allox/kernel"
	"github.com/allox-os/allox/mkimage/internal/spec"
)

// fakeAgent is an executable that answers --version as the real kata-agent does. It stands in for
// the agent, which is Rust and cannot be built or downloaded here; what the tests check is how
// the build takes, records and places whatever the spec names.
const fakeAgent = "#!/bin/sh\necho 'kata-agent version 3.2.0 (api version: 0.0.1, commit version: abc, type: rust, extra-features: [])'\n"

const fakeVersion = "kata-agent version 3.2.0 (api version: 0.0.1, commit version: abc, type: rust, extra-features: [])"

// agentState is a build state for images/allox.hcl with the kata block's agent set to a.
func agentState(t *testing.T, a *spec.KataAgent) *state {
	t.Helper()
	img, diags := spec.Load(filepath.Join("..", "..", "..", "images", "allox.hcl"))
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	img.Kata.Agent = a
	opt := Options{Spec: img, SpecText: []byte("test"), ModuleRoot: t.TempDir(), Progress: io.Discard}
	return newState(opt, t.TempDir(), t.TempDir())
}

func writeFile(t *testing.T, name, data string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(data), mode); err != nil {
		t.Fatal(err)
	}
	return p
}

// gzipInitrd is a Kata-like initrd: a gzip'd newc cpio whose /usr/bin/kata-agent is a symlink.
func gzipInitrd(t *testing.T) string {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	w := cpio.NewWriter(zw)
	for _, e := range []struct{ name, link, data string }{
		{name: "usr/bin/kata-agent", link: "../libexec/kata-agent"},
		{name: "usr/libexec/kata-agent", data: fakeAgent},
	} {
		h := &cpio.Header{Name: e.name, Mode: cpio.TypeReg | 0o755, Size: int64(len(e.data))}
		body := e.data
		if e.link != "" {
			h.Mode, h.Linkname, h.Size, body = cpio.TypeSymlink|0o777, e.link, int64(len(e.link)), e.link
		}
		if err := w.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write([]byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil || zw.Close() != nil {
		t.Fatal(err)
	}
	return writeFile(t, "kata-containers-initrd.img", buf.String(), 0o644)
}

func TestBringAgent(t *testing.T) {
	bin := writeFile(t, "kata-agent", fakeAgent, 0o755)
	initrd := gzipInitrd(t)
	sum, err := kernel.HashFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		agent *spec.KataAgent
		want  KataAgent
	}{
		{"binary", &spec.KataAgent{Binary: bin, MaxRestarts: 3},
			KataAgent{Path: "/usr/bin/kata-agent", SHA256: sum, Version: fakeVersion, Source: "binary", From: bin, MaxRestarts: 3}},
		{"from_image", &spec.KataAgent{FromImage: initrd},
			KataAgent{Path: "/usr/bin/kata-agent", SHA256: sum, Version: fakeVersion, Source: "from_image", From: initrd,
				InImage: "/usr/libexec/kata-agent", Format: "gzip'd newc cpio"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := agentState(t, tc.agent)
			if err := bringAgent(context.Background(), s); err != nil {
				t.Fatal(err)
			}
			if got := *s.prov.KataAgent; got != tc.want {
				t.Errorf("recorded %+v\nwant     %+v", got, tc.want)
			}
			if s.agent == nil || s.agent.Path != "/usr/bin/kata-agent" {
				t.Fatalf("placed %+v; want /usr/bin/kata-agent", s.agent)
			}
			if got, _ := kernel.HashFile(s.agent.Source); got != sum {
				t.Errorf("the file placed in the image has sha256 %s, want %s", got, sum)
			}
			in := s.prov.Inputs[len(s.prov.Inputs)-1]
			if in.Kind != "kata-agent-"+tc.want.Source || in.Name != tc.want.From {
				t.Errorf("input %+v; want the agent's source recorded", in)
			}
		})
	}
}

func TestBringAgentThatDoesNotRun(t *testing.T) {
	bin := writeFile(t, "kata-agent", "\x7fELF not for this host", 0o755)
	err := bringAgent(context.Background(), agentState(t, &spec.KataAgent{Binary: bin}))
	if err == nil || !strings.HasPrefix(err.Error(), "kata.agent.binary "+bin+": kata-agent --version: ") || !strings.Contains(err.Error(), "must run on the build host") {
		t.Errorf("err = %v; want one naming kata.agent.binary, the --version run and why", err)
	}
	if err := bringAgent(context.Background(), agentState(t, nil)); err != nil {
		t.Errorf("no agent block: %v", err)
	}
}

// TestSBOMAgent: the agent is a package of the image, with its sha256 and the version it printed.
func TestSBOMAgent(t *testing.T) {
	p := testProvenance(t)
	p.KataAgent = &KataAgent{Path: "/usr/bin/kata-agent", SHA256: strings.Repeat("12", 32), Version: fakeVersion, Source: "binary", From: "/opt/kata/bin/kata-agent"}
	data, err := EncodeSBOM(p)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Packages []struct {
			SPDXID, Name, VersionInfo, PackageFileName, Comment string
			Checksums                                           []struct{ Algorithm, ChecksumValue string }
		}
		Relationships []struct{ SpdxElementId, RelatedSpdxElement, RelationshipType string }
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, pkg := range doc.Packages {
		if pkg.SPDXID != "SPDXRef-Package-kata-agent" {
			continue
		}
		found = true
		if pkg.Name != "kata-agent" || pkg.VersionInfo != "3.2.0" || pkg.PackageFileName != "/usr/bin/kata-agent" ||
			len(pkg.Checksums) != 1 || pkg.Checksums[0].ChecksumValue != strings.Repeat("12", 32) || !strings.Contains(pkg.Comment, fakeVersion) {
			t.Errorf("kata-agent package %+v", pkg)
		}
	}
	contained := false
	for _, r := range doc.Relationships {
		contained = contained || r.RelatedSpdxElement == "SPDXRef-Package-kata-agent" && r.RelationshipType == "CONTAINS"
	}
	if !found || !contained {
		t.Errorf("SBOM lacks the kata-agent package (%v) or its CONTAINS relationship (%v)", found, contained)
	}
}
