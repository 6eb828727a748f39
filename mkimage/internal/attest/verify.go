package attest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	intoto "github.com/in-toto/attestation/go/v1"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/allox-os/allox/internal/artifact"
	"github.com/allox-os/allox/mkimage/internal/build"
)

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

// Verify checks the attestation of the build in dir with the trusted key: the envelope's
// signature, then every subject against its file, and that every output of dir is a subject.
// It returns the statement; each refusal wraps one of the package's sentinels and names the file.
func Verify(ctx context.Context, dir string, key *Key) (*intoto.Statement, error) {
	env, err := ReadEnvelope(File(dir))
	if err != nil {
		return nil, err
	}
	payload, err := Open(ctx, env, key)
	if err != nil {
		return nil, err
	}
	st, err := ParseStatement(payload)
	if err != nil {
		return nil, err
	}
	if err := CheckSubjects(dir, st); err != nil {
		return nil, err
	}
	return st, nil
}

// CheckSubjects compares every subject with its file in dir and names each output of dir
// (build.OutputFiles and manifest.json) that no subject lists.
func CheckSubjects(dir string, st *intoto.Statement) error {
	var errs []error
	listed := map[string]bool{}
	for _, s := range st.GetSubject() {
		listed[s.GetName()] = true
		want := s.GetDigest()["sha256"]
		got, err := artifact.SHA256File(filepath.Join(dir, filepath.FromSlash(s.GetName())))
		switch {
		case errors.Is(err, os.ErrNotExist):
			errs = append(errs, fmt.Errorf("%s: missing from %s", s.GetName(), dir))
		case err != nil:
			errs = append(errs, fmt.Errorf("%s: %w", s.GetName(), err))
		case got != want:
			errs = append(errs, fmt.Errorf("%s: sha256 %s, the attestation records %s: the file changed after signing", s.GetName(), got, want))
		}
	}
	files, err := build.OutputFiles(dir)
	if err != nil {
		return err
	}
	for _, f := range append(files, artifact.Manifest) {
		if !listed[f] {
			errs = append(errs, fmt.Errorf("%s: not a subject of the attestation", f))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrSubject, errors.Join(errs...))
	}
	return nil
}
