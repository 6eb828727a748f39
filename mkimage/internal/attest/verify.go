package attest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	intoto "github.com/in-toto/attestation/go/v1"

	"github.com/allox-os/allox/internal/artifact"
	"github.com/allox-os/allox/internal/attestation"
	"github.com/allox-os/allox/mkimage/internal/build"
)

// Verify checks the attestation of the build in dir with the trusted key: the envelope's
// signature, then every subject against its file, and that every output of dir is a subject.
// It returns the statement; each refusal wraps one of internal/attestation's sentinels and names
// the file.
func Verify(ctx context.Context, dir string, key *attestation.Key) (*intoto.Statement, error) {
	env, err := attestation.ReadEnvelope(attestation.File(dir))
	if err != nil {
		return nil, err
	}
	payload, err := attestation.Open(ctx, env, key)
	if err != nil {
		return nil, err
	}
	st, err := attestation.ParseStatement(payload)
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
		return fmt.Errorf("%w: %w", attestation.ErrSubject, errors.Join(errs...))
	}
	return nil
}
