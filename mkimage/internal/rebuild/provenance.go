package rebuild

import (
	"fmt"

	slsa "github.com/in-toto/attestation/go/predicates/provenance/v1"
	intoto "github.com/in-toto/attestation/go/v1"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/allox-os/allox/mkimage/internal/attest"
)

// recorded is what a rebuild reads from the provenance.
type recorded struct {
	image      string // name version, for messages
	specPath   string // relative to the source tree
	specSHA    string
	specText   []byte
	epoch      int64
	kernelKey  string
	deps       []dep
	subjects   map[string]string // name → sha256
	subjectsBy []string          // names, in the statement's order
}

// dep is one resolved dependency.
type dep struct {
	kind, name, detail, version, goSum string
	digest                             map[string]string
}

func (d dep) String() string { return d.kind + " " + d.name }

// readProvenance decodes the statement's SLSA predicate into what a rebuild needs.
func readProvenance(st *intoto.Statement) (*recorded, error) {
	raw, err := protojson.Marshal(st.GetPredicate())
	if err != nil {
		return nil, err
	}
	var p slsa.Provenance
	if err := protojson.Unmarshal(raw, &p); err != nil {
		return nil, fmt.Errorf("the predicate is no SLSA provenance v1: %w", err)
	}
	bd := p.GetBuildDefinition()
	if bd.GetBuildType() != attest.BuildType {
		return nil, fmt.Errorf("buildType %q: mkimage rebuilds only %q", bd.GetBuildType(), attest.BuildType)
	}
	ext := bd.GetExternalParameters().AsMap()
	specParams, _ := ext["spec"].(map[string]any)
	r := &recorded{subjects: map[string]string{}}
	r.specPath, _ = specParams["path"].(string)
	r.specSHA, _ = specParams["sha256"].(string)
	text, _ := specParams["text"].(string)
	r.specText = []byte(text)
	epoch, ok := ext["sourceDateEpoch"].(float64)
	if r.specPath == "" || r.specSHA == "" || !ok {
		return nil, fmt.Errorf("externalParameters must name spec.path, spec.sha256 and sourceDateEpoch (an attestation of another mkimage?)")
	}
	r.epoch = int64(epoch)
	if img, ok := ext["image"].(map[string]any); ok {
		r.image = fmt.Sprintf("%v %v", img["name"], img["version"])
	}
	r.kernelKey, _ = bd.GetInternalParameters().AsMap()["kernelBuildKey"].(string)
	for _, rd := range bd.GetResolvedDependencies() {
		a := rd.GetAnnotations().AsMap()
		d := dep{name: rd.GetName(), digest: rd.GetDigest()}
		d.kind, _ = a["kind"].(string)
		d.detail, _ = a["detail"].(string)
		d.version, _ = a["version"].(string)
		d.goSum, _ = a["goSum"].(string)
		r.deps = append(r.deps, d)
	}
	for _, s := range st.GetSubject() {
		r.subjects[s.GetName()] = s.GetDigest()["sha256"]
		r.subjectsBy = append(r.subjectsBy, s.GetName())
	}
	return r, nil
}

func (r *recorded) byKind(kind string) []dep {
	var out []dep
	for _, d := range r.deps {
		if d.kind == kind {
			out = append(out, d)
		}
	}
	return out
}
