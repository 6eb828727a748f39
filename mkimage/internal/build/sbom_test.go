package build

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	spdxjson "github.com/spdx/tools-golang/json"

	"github.com/allox-os/allox/kernel"
	"github.com/allox-os/allox/rootfs"
)

// initBinary builds the Go init the way the pipeline does, once per test run.
var initBinary = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "allox-build-test-")
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "init")
	return out, goBuild(context.Background(), "../../..", initPackage, nil, out)
})

// testProvenance describes a build whose one Go binary is the real Go init: its build info is read
// the way writeProvenance reads the binaries it built.
func testProvenance(t *testing.T) *Provenance {
	t.Helper()
	exe, err := initBinary()
	if err != nil {
		t.Fatal(err)
	}
	bins, err := readGoBinaries([]rootfs.Binary{{Path: "/sbin/init", Source: exe}})
	if err != nil {
		t.Fatal(err)
	}
	sum, err := kernel.HashFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	return &Provenance{
		Image: ImageID{"allox", "0.1.0"}, SourceDateEpoch: 1700000000,
		Kernel: KernelSource{DebianPackage: "linux-source-6.12", Version: "6.12.117-1~deb12u1", SHA256: strings.Repeat("ab", 32)},
		Inputs: []Input{{Kind: "spec", Name: "images/allox.hcl", SHA256: strings.Repeat("cd", 32)},
			{Kind: "go-binary", Name: "/sbin/init", SHA256: sum}},
		Packages:   []rootfs.Package{{Name: "bash", Version: "5.2.15-2+b7", Arch: "amd64"}, {Name: "tzdata", Version: "2024a-0+deb12u1", Arch: "all"}},
		GoBinaries: bins,
		Outputs:    []Output{{Path: "bzImage", Size: 3, SHA256: strings.Repeat("ef", 32)}},
	}
}

type sbomDoc struct {
	SPDXVersion, DataLicense, SPDXID, Name, DocumentNamespace string
	CreationInfo                                              struct{ Created string }
	Packages                                                  []struct {
		SPDXID, Name, VersionInfo string
		DownloadLocation          string
		ExternalRefs              []struct{ ReferenceType, ReferenceLocator string }
		Checksums                 []struct{ Algorithm, ChecksumValue string }
	}
	Relationships []struct{ SpdxElementId, RelatedSpdxElement, RelationshipType string }
}

func TestSBOMStructure(t *testing.T) {
	p := testProvenance(t)
	data, err := EncodeSBOM(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := spdxjson.Read(bytes.NewReader(data)); err != nil {
		t.Fatalf("the SPDX library does not read our SBOM back: %v", err)
	}
	var doc sbomDoc
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.SPDXVersion != "SPDX-2.3" || doc.DataLicense != "CC0-1.0" || doc.SPDXID != "SPDXRef-DOCUMENT" {
		t.Errorf("document header: %+v", doc)
	}
	if doc.CreationInfo.Created != "2023-11-14T22:13:20Z" {
		t.Errorf("created %q, want SOURCE_DATE_EPOCH 1700000000", doc.CreationInfo.Created)
	}
	if !regexp.MustCompile(`^urn:uuid:[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`).MatchString(doc.DocumentNamespace) {
		t.Errorf("namespace %q is not a name-based urn:uuid", doc.DocumentNamespace)
	}
	ids, purls := map[string]bool{}, map[string]string{}
	idRE := regexp.MustCompile(`^SPDXRef-[A-Za-z0-9.-]+$`)
	for _, pkg := range doc.Packages {
		if ids[pkg.SPDXID] || !idRE.MatchString(pkg.SPDXID) {
			t.Errorf("package id %q is duplicated or malformed", pkg.SPDXID)
		}
		ids[pkg.SPDXID] = true
		for _, r := range pkg.ExternalRefs {
			purls[r.ReferenceLocator] = pkg.SPDXID
		}
	}
	for _, want := range []string{"pkg:deb/debian/bash@5.2.15-2%2Bb7?arch=amd64", "pkg:deb/debian/tzdata@2024a-0%2Bdeb12u1?arch=all",
		"pkg:deb/debian/linux-source-6.12@6.12.117-1~deb12u1?arch=all", "pkg:golang/github.com/allox-os/allox"} {
		if purls[want] == "" {
			t.Errorf("no package with purl %s", want)
		}
	}
	mods := p.GoBinaries[0].Modules
	if len(mods) < 2 || !slices.ContainsFunc(mods, func(m GoModule) bool { return m.Path == "golang.org/x/sys" }) {
		t.Errorf("the init's build info lists %v, want golang.org/x/sys among its dependencies", mods)
	}
	for _, m := range mods[1:] {
		if want := "pkg:golang/" + m.Path + "@" + m.Version; purls[want] == "" {
			t.Errorf("no package with purl %s", want)
		}
	}
	binSum := ""
	for _, pkg := range doc.Packages {
		if pkg.SPDXID == "SPDXRef-Package-bin--sbin-init" && len(pkg.Checksums) == 1 {
			binSum = pkg.Checksums[0].ChecksumValue
		}
	}
	if binSum != p.Inputs[1].SHA256 {
		t.Errorf("the init's package has sha256 %q, want %s of its go-binary input", binSum, p.Inputs[1].SHA256)
	}
	checkRelationships(t, doc, ids)
}

// checkRelationships: the document DESCRIBES exactly the image, and every other package is
// CONTAINed: by the image, or (a Go module) by a Go binary that the image contains.
func checkRelationships(t *testing.T, doc sbomDoc, ids map[string]bool) {
	t.Helper()
	root := doc.Packages[0].SPDXID
	contained := map[string]bool{}
	for _, r := range doc.Relationships {
		if !ids[r.RelatedSpdxElement] || (r.SpdxElementId != "SPDXRef-DOCUMENT" && !ids[r.SpdxElementId]) {
			t.Errorf("relationship %+v names an unknown element", r)
		}
		switch r.RelationshipType {
		case "DESCRIBES":
			if r.SpdxElementId != "SPDXRef-DOCUMENT" || r.RelatedSpdxElement != root {
				t.Errorf("DESCRIBES %+v, want the document describing %s", r, root)
			}
		case "CONTAINS":
			contained[r.RelatedSpdxElement] = true
			if r.SpdxElementId != root && !strings.HasPrefix(r.SpdxElementId, "SPDXRef-Package-bin-") {
				t.Errorf("%s CONTAINS %s: only the image and its binaries contain packages", r.SpdxElementId, r.RelatedSpdxElement)
			}
		}
	}
	for id := range ids {
		if id != root && !contained[id] {
			t.Errorf("no package CONTAINS %s", id)
		}
	}
}

func TestSBOMDeterministic(t *testing.T) {
	p := testProvenance(t)
	a, _ := EncodeSBOM(p)
	b, _ := EncodeSBOM(testProvenance(t))
	if !bytes.Equal(a, b) {
		t.Error("two encodings of the same provenance differ")
	}
	p.Inputs[0].SHA256 = strings.Repeat("00", 32) // another spec
	c, _ := EncodeSBOM(p)
	var x, y sbomDoc
	json.Unmarshal(a, &x)
	json.Unmarshal(c, &y)
	if x.DocumentNamespace == y.DocumentNamespace {
		t.Errorf("two specs share the namespace %s", x.DocumentNamespace)
	}
}
