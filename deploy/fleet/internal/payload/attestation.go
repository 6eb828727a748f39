package payload

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"github.com/allox-os/allox/internal/artifact"
	"github.com/allox-os/allox/internal/attestation"
)

// NoVerify is the trusted-key setting that installs without checking the attestation.
const NoVerify = "none"

// CheckAttestation checks the payload in dir against its signed attestation: the envelope's
// signature with the trusted key, then every payload file (files, slash-separated; nil is every
// file below dir, as on a node) against the statement's subjects. Each refusal wraps one of attestation's sentinels (missing, unsigned,
// another key, a signature that does not verify, a subject mismatch naming the file).
func CheckAttestation(ctx context.Context, dir string, files []string, key *attestation.Key) error {
	env, err := attestation.ReadEnvelope(attestation.File(dir))
	if err != nil {
		return err
	}
	payload, err := attestation.Open(ctx, env, key)
	if err != nil {
		return err
	}
	st, err := attestation.ParseStatement(payload)
	if err != nil {
		return err
	}
	subjects := map[string]string{}
	for _, s := range st.GetSubject() {
		subjects[s.GetName()] = s.GetDigest()["sha256"]
	}
	if files == nil {
		if files, err = allFiles(dir); err != nil {
			return err
		}
	}
	var errs []error
	for _, f := range files {
		if f == artifact.Attestation {
			continue
		}
		want, ok := subjects[f]
		if !ok {
			errs = append(errs, fmt.Errorf("%s: not a subject of the attestation", f))
			continue
		}
		got, err := artifact.SHA256File(filepath.Join(dir, filepath.FromSlash(f)))
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("%s: %w", f, err))
		case got != want:
			errs = append(errs, fmt.Errorf("%s: sha256 %s, the attestation records %s: the file changed after signing", f, got, want))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", attestation.ErrSubject, errors.Join(errs...))
	}
	return nil
}

// allFiles lists every non-directory below dir, slash-separated.
func allFiles(dir string) ([]string, error) {
	var files []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		r, err := filepath.Rel(dir, p)
		files = append(files, filepath.ToSlash(r))
		return err
	})
	return files, err
}
