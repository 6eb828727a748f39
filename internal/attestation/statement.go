// Package attestation is the signed provenance mkimage writes beside a build and every installer
// checks: a DSSE envelope (attestation.intoto.jsonl) around an in-toto Statement v1 with SLSA
// Provenance v1, signed with an ed25519 or ECDSA P-256 key. It loads keys, signs, opens an envelope
// with a trusted key (each refusal its own error) and parses the statement. The envelope and the
// formats are go-securesystemslib's and the in-toto Go bindings'; nothing here signs by hand.
package attestation

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"

	intoto "github.com/in-toto/attestation/go/v1"
	"google.golang.org/protobuf/encoding/protojson"
)

// PredicateType is SLSA Provenance v1.
const PredicateType = "https://slsa.dev/provenance/v1"

// ParseStatement decodes and checks a signed payload: an in-toto Statement v1 with SLSA
// Provenance v1, every subject a local path with a sha256.
func ParseStatement(payload []byte) (*intoto.Statement, error) {
	var st intoto.Statement
	if err := protojson.Unmarshal(payload, &st); err != nil {
		return nil, fmt.Errorf("%w: the signed payload is no in-toto statement: %w", ErrMalformed, err)
	}
	if err := st.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	if st.GetPredicateType() != PredicateType {
		return nil, fmt.Errorf("%w: predicateType %q, want %q", ErrMalformed, st.GetPredicateType(), PredicateType)
	}
	for _, s := range st.GetSubject() {
		if !filepath.IsLocal(s.GetName()) || s.GetDigest()["sha256"] == "" {
			return nil, fmt.Errorf("%w: subject %q must be a path inside the output directory with a sha256", ErrMalformed, s.GetName())
		}
	}
	return &st, nil
}

// Encode renders a statement as install.sh and people read it: protojson's field order, one key
// per line (re-indented with encoding/json, since protojson varies its white space on purpose), so
// the same statement always has the same bytes.
func Encode(st *intoto.Statement) ([]byte, error) {
	if err := st.Validate(); err != nil {
		return nil, fmt.Errorf("in-toto statement: %w", err)
	}
	raw, err := protojson.Marshal(st)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, raw, "", "  "); err != nil {
		return nil, err
	}
	buf.WriteByte('\n')
	return buf.Bytes(), nil
}
