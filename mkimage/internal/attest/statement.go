// Package attest turns a build's provenance (out/manifest.json) into a signed attestation a
// platform's tools read: an in-toto Statement v1 whose subjects are every output with its sha256
// and whose predicate is SLSA Provenance v1, in a DSSE envelope signed with an ed25519 or ECDSA
// P-256 key (attestation.intoto.jsonl beside the outputs, through internal/attestation). It checks
// one too: the signature with a trusted public key, every subject against its file, and that every
// output is a subject. The formats are the in-toto attestation Go bindings'; nothing here encodes
// or signs by hand.
package attest

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	slsa "github.com/in-toto/attestation/go/predicates/provenance/v1"
	intoto "github.com/in-toto/attestation/go/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/allox-os/allox/internal/artifact"
	"github.com/allox-os/allox/internal/attestation"
	"github.com/allox-os/allox/mkimage/internal/build"
)

// The statement's and the predicate's types, and the build type this provenance describes: a
// mkimage build of an image spec from an Allox source tree.
const (
	PredicateType = attestation.PredicateType
	BuildType     = "urn:allox-os:mkimage:build:v1"
	// DefaultBuilderID names the builder when the platform gives none (mkimage -builder-id).
	DefaultBuilderID = "urn:allox-os:mkimage"
)

// Dependency kinds beyond the manifest's input kinds (spec, fragment, patch, ...): the source tree,
// the Debian packages, the Go modules and the toolchain.
const (
	KindSource     = "source"
	KindDebian     = "debian-package"
	KindGoModule   = "go-module"
	KindTool       = "tool"
	kindAnnotation = "kind"
)

// Definition is what the statement records beyond the manifest: the spec's text and its resolved
// plan (mkimage plan), with the checkout's and the output directory's absolute paths made relative,
// so two machines that build the same spec attest the same plan.
type Definition struct {
	SpecText  []byte
	Plan      any
	BuilderID string
	// Commit is the commit whose tree is the source's, when the checkout is clean.
	Commit string
}

// Statement renders the in-toto statement of the build in dir that p describes. manifestSHA is the
// sha256 of dir/manifest.json, a subject beside the outputs. The bytes are deterministic
// (attestation.Encode).
func Statement(p *build.Provenance, manifestSHA string, def Definition) ([]byte, error) {
	subjects := []*intoto.ResourceDescriptor{{Name: artifact.Manifest, Digest: map[string]string{"sha256": manifestSHA}}}
	for _, o := range p.Outputs {
		subjects = append(subjects, &intoto.ResourceDescriptor{Name: o.Path, Digest: map[string]string{"sha256": o.SHA256}})
	}
	sort.Slice(subjects, func(i, j int) bool { return subjects[i].Name < subjects[j].Name })
	ext, err := structOf(map[string]any{
		"spec":            map[string]any{"path": specPath(p), "sha256": p.SpecSHA256(), "text": string(def.SpecText)},
		"image":           map[string]any{"name": p.Image.Name, "version": p.Image.Version},
		"sourceDateEpoch": p.SourceDateEpoch,
		"plan":            def.Plan,
	})
	if err != nil {
		return nil, err
	}
	internal, err := structOf(map[string]any{"kernelBuildKey": p.KernelBuildKey})
	if err != nil {
		return nil, err
	}
	deps, err := dependencies(p, def.Commit)
	if err != nil {
		return nil, err
	}
	builderID := def.BuilderID
	if builderID == "" {
		builderID = DefaultBuilderID
	}
	pred := &slsa.Provenance{
		BuildDefinition: &slsa.BuildDefinition{BuildType: BuildType, ExternalParameters: ext,
			InternalParameters: internal, ResolvedDependencies: deps},
		RunDetails: &slsa.RunDetails{Builder: &slsa.Builder{Id: builderID, Version: toolVersions(p, "go")}},
	}
	if err := pred.Validate(); err != nil {
		return nil, fmt.Errorf("BUG: SLSA provenance: %w", err)
	}
	predStruct, err := protoStruct(pred)
	if err != nil {
		return nil, err
	}
	st := &intoto.Statement{Type: intoto.StatementTypeUri, Subject: subjects, PredicateType: PredicateType, Predicate: predStruct}
	data, err := attestation.Encode(st)
	if err != nil {
		return nil, fmt.Errorf("BUG: %w", err)
	}
	return data, nil
}

func specPath(p *build.Provenance) string {
	for _, in := range p.Inputs {
		if in.Kind == "spec" {
			return in.Name
		}
	}
	return ""
}

// dependencies are the build's resolved dependencies: the source tree, every input of the manifest
// (spec, kernel source, fragments, patches, the Debian userland, the Go binaries, ...), every Debian
// package with its version, every Go module linked into a binary with its go.sum hash, and every
// tool of the toolchain with its version.
func dependencies(p *build.Provenance, commit string) ([]*intoto.ResourceDescriptor, error) {
	var deps []*intoto.ResourceDescriptor
	add := func(rd *intoto.ResourceDescriptor, kind string, notes map[string]any) error {
		m := map[string]any{kindAnnotation: kind}
		for k, v := range notes {
			m[k] = v
		}
		s, err := structpb.NewStruct(m)
		if err != nil {
			return fmt.Errorf("annotations of %s: %w", rd.Name, err)
		}
		rd.Annotations = s
		deps = append(deps, rd)
		return nil
	}
	if s := p.Source; s != nil {
		digest := map[string]string{"gitTree": s.GitTree}
		if commit != "" {
			digest["gitCommit"] = commit
		}
		if err := add(&intoto.ResourceDescriptor{Name: "allox", Digest: digest}, KindSource, nil); err != nil {
			return nil, err
		}
	}
	for _, in := range p.Inputs {
		notes := map[string]any{}
		if in.Detail != "" {
			notes["detail"] = in.Detail
		}
		rd := &intoto.ResourceDescriptor{Name: in.Name, Digest: map[string]string{"sha256": in.SHA256}}
		if in.Kind == "kernel-source" && p.Kernel.DebianPackage != "" {
			rd.Uri = "pkg:deb/debian/" + p.Kernel.DebianPackage + "@" + p.Kernel.Version
		}
		if err := add(rd, in.Kind, notes); err != nil {
			return nil, err
		}
	}
	for _, d := range p.Packages {
		rd := &intoto.ResourceDescriptor{Name: d.Name, Uri: "pkg:deb/debian/" + d.Name + "@" + d.Version + "?arch=" + d.Arch}
		if err := add(rd, KindDebian, map[string]any{"version": d.Version, "arch": d.Arch}); err != nil {
			return nil, err
		}
	}
	for _, m := range goModules(p) {
		rd := &intoto.ResourceDescriptor{Name: m.Path, Uri: "pkg:golang/" + m.Path}
		notes := map[string]any{"version": m.Version}
		if m.Version != "" && m.Version != "(devel)" {
			rd.Uri += "@" + m.Version
		}
		if m.Sum != "" {
			notes["goSum"] = m.Sum
		}
		if err := add(rd, KindGoModule, notes); err != nil {
			return nil, err
		}
	}
	for _, t := range p.Toolchain {
		if err := add(&intoto.ResourceDescriptor{Name: t.Name}, KindTool, map[string]any{"version": t.Version}); err != nil {
			return nil, err
		}
	}
	return deps, nil
}

// goModules are the modules of every binary, each once, sorted by path and version.
func goModules(p *build.Provenance) []build.GoModule {
	seen := map[string]build.GoModule{}
	for _, b := range p.GoBinaries {
		for _, m := range b.Modules {
			seen[m.Path+"@"+m.Version] = m
		}
	}
	keys := make([]string, 0, len(seen))
	for k := range seen {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]build.GoModule, 0, len(keys))
	for _, k := range keys {
		out = append(out, seen[k])
	}
	return out
}

func toolVersions(p *build.Provenance, names ...string) map[string]string {
	v := map[string]string{}
	for _, t := range p.Toolchain {
		for _, n := range names {
			if t.Name == n {
				v[t.Name] = t.Version
			}
		}
	}
	return v
}

// structOf converts v (JSON-able) into a protobuf Struct through its JSON encoding.
func structOf(v any) (*structpb.Struct, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return jsonStruct(data)
}

// protoStruct converts a message into a Struct (a statement's predicate) through protojson.
func protoStruct(m proto.Message) (*structpb.Struct, error) {
	data, err := protojson.Marshal(m)
	if err != nil {
		return nil, err
	}
	return jsonStruct(data)
}

func jsonStruct(data []byte) (*structpb.Struct, error) {
	s := &structpb.Struct{}
	if err := protojson.Unmarshal(data, s); err != nil {
		return nil, err
	}
	return s, nil
}

// Relativize rewrites, in a JSON-able value, every string that is an absolute path below one of
// roots (the checkout, the output directory, the cache) into the path relative to it, prefixed by
// the root's label: "$SRC/kernel/fragments/base.conf". The plan holds such paths.
func Relativize(v any, roots map[string]string) (any, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var generic any
	if err := json.Unmarshal(data, &generic); err != nil {
		return nil, err
	}
	return relativize(generic, roots), nil
}

func relativize(v any, roots map[string]string) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = relativize(e, roots)
		}
	case []any:
		for i, e := range x {
			x[i] = relativize(e, roots)
		}
	case string:
		best := ""
		for root := range roots {
			if (x == root || strings.HasPrefix(x, root+"/")) && len(root) > len(best) {
				best = root
			}
		}
		if best != "" {
			return roots[best] + strings.TrimPrefix(x, best)
		}
	}
	return v
}
