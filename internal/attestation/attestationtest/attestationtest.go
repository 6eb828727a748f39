// Package attestationtest signs small build output directories for the installers' tests: a fresh
// ed25519 key pair in PEM files, and an attestation whose subjects are the files of a directory, in
// the format mkimage attest writes (attestation.Encode, attestation.Sign).
package attestationtest

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"testing"

	intoto "github.com/in-toto/attestation/go/v1"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/allox-os/allox/internal/artifact"
	"github.com/allox-os/allox/internal/attestation"
)

// KeyFiles writes a fresh key pair of kind ("ed25519", "p256", and for refusal tests "p384" or
// "rsa") as PEM files (PKCS#8, PKIX) into a temporary directory and returns their paths.
func KeyFiles(tb testing.TB, kind string) (priv, pub string) {
	tb.Helper()
	var k crypto.Signer
	var err error
	switch kind {
	case "ed25519":
		_, k, err = ed25519.GenerateKey(rand.Reader)
	case "p256":
		k, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case "p384":
		k, err = ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	case "rsa":
		k, err = rsa.GenerateKey(rand.Reader, 2048)
	default:
		tb.Fatalf("BUG: key kind %q", kind)
	}
	if err != nil {
		tb.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		tb.Fatal(err)
	}
	pubDER, err := x509.MarshalPKIXPublicKey(k.Public())
	if err != nil {
		tb.Fatal(err)
	}
	dir := tb.TempDir()
	priv, pub = filepath.Join(dir, kind+".pem"), filepath.Join(dir, kind+".pub")
	if err := os.WriteFile(priv, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(pub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}), 0o644); err != nil {
		tb.Fatal(err)
	}
	return priv, pub
}

// KeyPair writes a fresh key pair ("ed25519" or "p256") and returns the signing key and the public
// key's PEM file.
func KeyPair(tb testing.TB, kind string) (*attestation.Key, string) {
	tb.Helper()
	priv, pub := KeyFiles(tb, kind)
	key, err := attestation.LoadKey(priv, true)
	if err != nil {
		tb.Fatal(err)
	}
	return key, pub
}

// SignDir writes dir's attestation, signed with key, whose subjects are every regular file below
// dir (but the attestation) with its sha256.
func SignDir(tb testing.TB, dir string, key *attestation.Key) {
	tb.Helper()
	var subjects []*intoto.ResourceDescriptor
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		r, err := filepath.Rel(dir, p)
		if err != nil || r == artifact.Attestation {
			return err
		}
		sum, err := artifact.SHA256File(p)
		subjects = append(subjects, &intoto.ResourceDescriptor{Name: filepath.ToSlash(r), Digest: map[string]string{"sha256": sum}})
		return err
	})
	if err != nil {
		tb.Fatal(err)
	}
	sort.Slice(subjects, func(i, j int) bool { return subjects[i].Name < subjects[j].Name })
	pred, err := structpb.NewStruct(map[string]any{"buildDefinition": map[string]any{"buildType": "urn:allox-os:test"}})
	if err != nil {
		tb.Fatal(err)
	}
	st, err := attestation.Encode(&intoto.Statement{Type: intoto.StatementTypeUri, Subject: subjects,
		PredicateType: attestation.PredicateType, Predicate: pred})
	if err != nil {
		tb.Fatal(err)
	}
	if err := attestation.Write(context.Background(), dir, st, key); err != nil {
		tb.Fatal(err)
	}
}
