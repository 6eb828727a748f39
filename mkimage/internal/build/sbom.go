package build

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"regexp"
	"strings"
	"time"

	spdxjson "github.com/spdx/tools-golang/json"
	"github.com/spdx/tools-golang/spdx/v2/common"
	spdx "github.com/spdx/tools-golang/spdx/v2/v2_3"

	"github.com/allox-os/allox/mkimage/internal/kataagent"
	"github.com/allox-os/allox/rootfs"
)

const noAssertion = "NOASSERTION"

// EncodeSBOM renders the SPDX 2.3 JSON bill of materials of the build that p describes: the image as
// the root package, which CONTAINS the kernel source, the Debian packages and the Go binaries, each of
// which CONTAINS the Go modules linked into it. It is a pure function of p (no clock, no random ids), so `mkimage verify` can check an SBOM
// by rendering it again from the manifest.
func EncodeSBOM(p *Provenance) ([]byte, error) {
	doc := &spdx.Document{
		SPDXVersion: spdx.Version, DataLicense: spdx.DataLicense, SPDXIdentifier: "DOCUMENT",
		DocumentName:      p.Image.Name + "-" + p.Image.Version,
		DocumentNamespace: namespace(p),
		CreationInfo: &spdx.CreationInfo{
			Creators: []common.Creator{{CreatorType: "Tool", Creator: "allox-mkimage"}},
			Created:  time.Unix(p.SourceDateEpoch, 0).UTC().Format(time.RFC3339),
		},
	}
	root := imagePackage(p)
	doc.Packages = append(doc.Packages, root)
	doc.Relationships = append(doc.Relationships, relate("DOCUMENT", root.PackageSPDXIdentifier, "DESCRIBES"))
	add := func(pkg *spdx.Package) {
		doc.Packages = append(doc.Packages, pkg)
		doc.Relationships = append(doc.Relationships, relate(root.PackageSPDXIdentifier, pkg.PackageSPDXIdentifier, "CONTAINS"))
	}
	add(kernelPackage(p.Kernel))
	for _, d := range p.Packages {
		add(debianPackage(d))
	}
	seen := map[common.ElementID]bool{}
	for _, b := range p.GoBinaries {
		bin := binaryPackage(p, b)
		add(bin)
		for _, m := range b.Modules {
			pkg := goModulePackage(m)
			if !seen[pkg.PackageSPDXIdentifier] {
				seen[pkg.PackageSPDXIdentifier] = true
				doc.Packages = append(doc.Packages, pkg)
			}
			doc.Relationships = append(doc.Relationships, relate(bin.PackageSPDXIdentifier, pkg.PackageSPDXIdentifier, "CONTAINS"))
		}
	}
	if a := p.KataAgent; a != nil {
		add(agentPackage(a))
	}
	var buf bytes.Buffer
	if err := spdxjson.Write(doc, &buf, spdxjson.Indent("  ")); err != nil {
		return nil, fmt.Errorf("encode SBOM: %w", err)
	}
	return buf.Bytes(), nil
}

// namespace is a urn:uuid URI derived from the image name, version and spec hash: the same spec
// always gets the same namespace, a different spec another one.
func namespace(p *Provenance) string {
	h := sha256.Sum256([]byte("allox sbom\n" + p.Image.Name + "\n" + p.Image.Version + "\n" + p.SpecSHA256()))
	h[6] = h[6]&0x0f | 0x50 // version 5 layout: a name-based UUID
	h[8] = h[8]&0x3f | 0x80
	return fmt.Sprintf("urn:uuid:%x-%x-%x-%x-%x", h[0:4], h[4:6], h[6:8], h[8:10], h[10:16])
}

func relate(a, b common.ElementID, kind string) *spdx.Relationship {
	return &spdx.Relationship{RefA: common.MakeDocElementID("", string(a)),
		RefB: common.MakeDocElementID("", string(b)), Relationship: kind}
}

// newPackage fills in what SPDX requires of every package and that we do not assert.
func newPackage(id, name, version string) *spdx.Package {
	return &spdx.Package{PackageName: name, PackageSPDXIdentifier: common.ElementID(spdxID(id)),
		PackageVersion: version, PackageDownloadLocation: noAssertion, PackageLicenseConcluded: noAssertion,
		PackageLicenseDeclared: noAssertion, PackageCopyrightText: noAssertion}
}

func imagePackage(p *Provenance) *spdx.Package {
	pkg := newPackage("Package-image-"+p.Image.Name, p.Image.Name, p.Image.Version)
	pkg.PrimaryPackagePurpose = "OPERATING-SYSTEM"
	var b strings.Builder
	b.WriteString("the artifacts of the image (and in manifest.json):")
	for _, o := range p.Outputs {
		if o.Path != SBOMName {
			fmt.Fprintf(&b, "\n%s sha256:%s", o.Path, o.SHA256)
		}
	}
	pkg.PackageComment = b.String()
	return pkg
}

func kernelPackage(k KernelSource) *spdx.Package {
	name, version := k.DebianPackage, k.Version
	if name == "" {
		name = k.Tarball
	}
	pkg := newPackage("Package-kernel-"+name, name, version)
	pkg.PackageChecksums = []common.Checksum{{Algorithm: common.SHA256, Value: k.SHA256}}
	pkg.PackageComment = "the kernel source tarball; the checksum is the tarball's"
	if k.DebianPackage != "" {
		pkg.PackageExternalReferences = []*spdx.PackageExternalReference{purl(debianPURL(rootfs.Package{Name: name, Version: version, Arch: "all"}))}
	}
	return pkg
}

func debianPackage(d rootfs.Package) *spdx.Package {
	pkg := newPackage("Package-deb-"+d.Name+"-"+d.Arch, d.Name, d.Version)
	pkg.PackageExternalReferences = []*spdx.PackageExternalReference{purl(debianPURL(d))}
	return pkg
}

// binaryPackage is one Go program of the image, with the sha256 the build recorded for it.
func binaryPackage(p *Provenance, b GoBinary) *spdx.Package {
	pkg := newPackage("Package-bin-"+b.Path, b.Path, b.GoVersion)
	pkg.PackageComment = "built from " + b.Package
	if b.Tags != "" {
		pkg.PackageComment += " with -tags " + b.Tags
	}
	for _, in := range p.Inputs {
		if in.Kind == "go-binary" && in.Name == b.Path {
			pkg.PackageChecksums = []common.Checksum{{Algorithm: common.SHA256, Value: in.SHA256}}
		}
	}
	return pkg
}

// agentPackage is the kata-agent: not built here, so its version is what it printed and its
// origin the file the spec named.
func agentPackage(a *KataAgent) *spdx.Package {
	pkg := newPackage("Package-kata-agent", "kata-agent", kataagent.ShortVersion(a.Version))
	pkg.PackageFileName = a.Path
	pkg.PackageChecksums = []common.Checksum{{Algorithm: common.SHA256, Value: a.SHA256}}
	pkg.PackageComment = fmt.Sprintf("%s at build time: %q; from %s %s", "kata-agent --version", a.Version, a.Source, a.From)
	if a.InImage != "" {
		pkg.PackageComment += fmt.Sprintf(" (%s, %s)", a.InImage, a.Format)
	}
	pkg.PrimaryPackagePurpose = "APPLICATION"
	return pkg
}

func goModulePackage(m GoModule) *spdx.Package {
	pkg := newPackage("Package-go-"+m.Path+"-"+m.Version, m.Path, m.Version)
	pkg.PackageExternalReferences = []*spdx.PackageExternalReference{purl(modulePURL(m))}
	if m.Sum != "" {
		pkg.PackageComment = "go.sum " + m.Sum
	}
	return pkg
}

func purl(locator string) *spdx.PackageExternalReference {
	return &spdx.PackageExternalReference{Category: "PACKAGE-MANAGER", RefType: "purl", Locator: locator}
}

// debianPURL is e.g. pkg:deb/debian/bash@5.2.15-2%2Bb7?arch=amd64.
func debianPURL(d rootfs.Package) string {
	arch := d.Arch
	if arch == "" {
		arch = "amd64"
	}
	return fmt.Sprintf("pkg:deb/debian/%s@%s?arch=%s", d.Name, purlEscape(d.Version), arch)
}

// purlEscape percent-encodes what a purl version may not hold literally (Debian versions have + and :).
func purlEscape(s string) string {
	var b bytes.Buffer
	for _, c := range []byte(s) {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_' || c == '~' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

var idUnsafe = regexp.MustCompile(`[^A-Za-z0-9.-]+`)

// spdxID makes an SPDXRef- identifier: letters, digits, dots and dashes only.
func spdxID(s string) string { return idUnsafe.ReplaceAllString(s, "-") }
