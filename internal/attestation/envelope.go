package attestation

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/secure-systems-lab/go-securesystemslib/dsse"

	"github.com/allox-os/allox/internal/artifact"
)

// PayloadType is the DSSE payload type of an in-toto statement.
const PayloadType = "application/vnd.in-toto+json"

// Sign wraps the statement in a DSSE envelope signed with key and returns it as one JSON line
// (the .intoto.jsonl form).
func Sign(ctx context.Context, statement []byte, key *Key) ([]byte, error) {
	signer, err := dsse.NewEnvelopeSigner(key)
	if err != nil {
		return nil, err
	}
	env, err := signer.SignPayload(ctx, PayloadType, statement)
	if err != nil {
		return nil, fmt.Errorf("sign with %s: %w", key.Ref, err)
	}
	line, err := json.Marshal(env)
	if err != nil {
		return nil, err
	}
	return append(line, '\n'), nil
}

// Sentinels of Verify: each refusal says which.
var (
	ErrMissing   = errors.New("attestation missing")
	ErrMalformed = errors.New("attestation malformed")
	ErrUnsigned  = errors.New("attestation unsigned")
	ErrOtherKey  = errors.New("attestation signed by another key")
	ErrSignature = errors.New("attestation signature does not verify")
	ErrSubject   = errors.New("attestation subject mismatch")
)

// ReadEnvelope reads the envelope in file (one DSSE envelope, as Sign writes it).
func ReadEnvelope(file string) (*dsse.Envelope, error) {
	data, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s does not exist: sign the build (mkimage attest DIR --key KEY)", ErrMissing, file)
	}
	if err != nil {
		return nil, err
	}
	var env dsse.Envelope
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&env); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrMalformed, file, err)
	}
	if env.PayloadType != PayloadType {
		return nil, fmt.Errorf("%w: %s: payloadType is %q, want %q", ErrMalformed, file, env.PayloadType, PayloadType)
	}
	return &env, nil
}

// Open checks the envelope's signature with the trusted key and returns the statement it signs.
// No signature, a signature by another key and a signature that does not verify (the statement or
// the signature changed after signing) are three distinct errors.
func Open(ctx context.Context, env *dsse.Envelope, key *Key) ([]byte, error) {
	if len(env.Signatures) == 0 {
		return nil, fmt.Errorf("%w: the envelope has no signature: sign it (mkimage attest DIR --key KEY)", ErrUnsigned)
	}
	var ids []string
	ours := false
	for _, s := range env.Signatures {
		ids = append(ids, s.KeyID)
		ours = ours || s.KeyID == key.keyID || s.KeyID == ""
	}
	if !ours {
		return nil, fmt.Errorf("%w: it is signed by keyid %q; the trusted key %s is %s: verify with the key that signed it, or have the build signed with yours",
			ErrOtherKey, ids, key.Ref, key.keyID)
	}
	v, err := dsse.NewEnvelopeVerifier(key)
	if err != nil {
		return nil, err
	}
	_, payload, err := v.VerifyAndDecode(ctx, env)
	if err != nil {
		return nil, fmt.Errorf("%w with the trusted key %s (%s): the statement or its signature changed after signing: %w", ErrSignature, key.Ref, key.keyID, err)
	}
	return payload, nil
}

// File is where the attestation of the build in dir lives.
func File(dir string) string { return filepath.Join(dir, artifact.Attestation) }

// Write signs the statement with key and writes the envelope into dir.
func Write(ctx context.Context, dir string, statement []byte, key *Key) error {
	line, err := Sign(ctx, statement, key)
	if err != nil {
		return err
	}
	tmp := File(dir) + ".new"
	if err := os.WriteFile(tmp, line, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, File(dir))
}
