package attestation_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/allox-os/allox/internal/attestation"
	"github.com/allox-os/allox/internal/attestation/attestationtest"
)

// FuzzOpen feeds arbitrary bytes as the attestation file: reading, opening with the trusted key and
// parsing never panic, and nothing opens unless the trusted key signed it (the seed is a signed
// envelope, which the fuzzer mutates).
func FuzzOpen(f *testing.F) {
	key, pub := attestationtest.KeyPair(f, "ed25519")
	dir := f.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "x"), []byte("x"), 0o644); err != nil {
		f.Fatal(err)
	}
	attestationtest.SignDir(f, dir, key)
	signed, err := os.ReadFile(attestation.File(dir))
	if err != nil {
		f.Fatal(err)
	}
	trusted, err := attestation.LoadKey(pub, false)
	if err != nil {
		f.Fatal(err)
	}
	env, err := attestation.ReadEnvelope(attestation.File(dir))
	if err != nil {
		f.Fatal(err)
	}
	want, err := env.DecodeB64Payload()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(signed)
	f.Add([]byte(`{"payloadType":"application/vnd.in-toto+json","payload":"e30=","signatures":[]}`))
	f.Add([]byte(`{"payloadType":"application/vnd.in-toto+json","payload":"e30=","signatures":[{"keyid":"","sig":"AAAA"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		file := filepath.Join(t.TempDir(), "a.intoto.jsonl")
		if err := os.WriteFile(file, data, 0o644); err != nil {
			t.Fatal(err)
		}
		env, err := attestation.ReadEnvelope(file)
		if err != nil {
			return
		}
		payload, err := attestation.Open(context.Background(), env, trusted)
		if err != nil {
			for _, want := range []error{attestation.ErrUnsigned, attestation.ErrOtherKey, attestation.ErrSignature} {
				if errors.Is(err, want) {
					return
				}
			}
			t.Fatalf("Open: an error of no kind: %v", err)
		}
		// It opened: the payload can only be the one the trusted key signed.
		if !bytes.Equal(payload, want) {
			t.Fatalf("Open accepted a payload the trusted key never signed:\n%q", payload)
		}
		if _, err := attestation.ParseStatement(payload); err != nil && !errors.Is(err, attestation.ErrMalformed) {
			t.Fatalf("ParseStatement: an error of no kind: %v", err)
		}
	})
}
