package attestation

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/secure-systems-lab/go-securesystemslib/dsse"
	"github.com/secure-systems-lab/go-securesystemslib/signerverifier"
)

// EnvPrefix marks a key reference that names an environment variable holding the PEM key
// (env://ALLOX_SIGNING_KEY), as cosign spells it; any other reference is a file.
const EnvPrefix = "env://"

// Key is a signing or a verifying key: ed25519 or ECDSA P-256, with the key id the envelope names
// it by. KeyID is "sha256:" and the hex sha256 of the public key's PKIX DER encoding, which a node
// computes with `openssl pkey -pubin -outform DER | sha256sum`.
type Key struct {
	sv    dsse.SignerVerifier
	keyID string
	Ref   string // where it was read from, for messages
}

// KeyID names the key.
func (k *Key) KeyID() (string, error) { return k.keyID, nil }

// Public is the public half.
func (k *Key) Public() crypto.PublicKey { return k.sv.Public() }

// Sign signs data (the DSSE pre-authentication encoding) with the private key.
func (k *Key) Sign(ctx context.Context, data []byte) ([]byte, error) { return k.sv.Sign(ctx, data) }

// Verify checks sig over data with the public key.
func (k *Key) Verify(ctx context.Context, data, sig []byte) error { return k.sv.Verify(ctx, data, sig) }

// readKeyRef reads the PEM a reference names.
func readKeyRef(ref string) ([]byte, error) {
	if ref == "" {
		return nil, errors.New("no key given: pass --key FILE (a PEM file) or --key env://VAR (a variable holding the PEM)")
	}
	if name, ok := strings.CutPrefix(ref, EnvPrefix); ok {
		v := os.Getenv(name)
		if v == "" {
			return nil, fmt.Errorf("key %s: the environment variable %s is empty or unset: export the PEM key in it", ref, name)
		}
		return []byte(v), nil
	}
	data, err := os.ReadFile(ref)
	if err != nil {
		return nil, fmt.Errorf("key: %w", err)
	}
	return data, nil
}

// LoadKey reads an ed25519 or ECDSA P-256 key (PKCS#8 or SEC 1 private key, or a PKIX public key)
// from a file or an environment variable. private says a signing key is required.
func LoadKey(ref string, private bool) (*Key, error) {
	data, err := readKeyRef(ref)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, fmt.Errorf("key %s: no PEM block: give a PEM key, e.g. from openssl genpkey -algorithm ed25519", ref)
	}
	isPrivate := strings.Contains(block.Type, "PRIVATE")
	if private && !isPrivate {
		return nil, fmt.Errorf("key %s: a %s cannot sign: give the private key", ref, block.Type)
	}
	sslib, err := signerverifier.LoadKey(data)
	if err != nil {
		return nil, fmt.Errorf("key %s: %w", ref, err)
	}
	var sv dsse.SignerVerifier
	switch sslib.KeyType {
	case signerverifier.ED25519KeyType:
		sv, err = signerverifier.NewED25519SignerVerifierFromSSLibKey(sslib)
	case signerverifier.ECDSAKeyType:
		sv, err = signerverifier.NewECDSASignerVerifierFromSSLibKey(sslib)
	default:
		return nil, fmt.Errorf("key %s: %s keys are not supported: use ed25519 or ECDSA P-256", ref, sslib.KeyType)
	}
	if err != nil {
		return nil, fmt.Errorf("key %s: %w", ref, err)
	}
	if ec, ok := sv.Public().(*ecdsa.PublicKey); ok && ec.Curve != elliptic.P256() {
		return nil, fmt.Errorf("key %s: ECDSA on %s is not supported: use P-256 (openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256)", ref, ec.Curve.Params().Name)
	}
	id, err := keyID(sv.Public())
	if err != nil {
		return nil, fmt.Errorf("key %s: %w", ref, err)
	}
	return &Key{sv: sv, keyID: id, Ref: ref}, nil
}

func keyID(pub crypto.PublicKey) (string, error) {
	switch pub.(type) {
	case ed25519.PublicKey, *ecdsa.PublicKey:
	default:
		return "", fmt.Errorf("BUG: public key of type %T", pub)
	}
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(der)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}
