package attest_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/secure-systems-lab/go-securesystemslib/dsse"

	"github.com/allox-os/allox/internal/attestation"
	"github.com/allox-os/allox/internal/attestation/attestationtest"
	"github.com/allox-os/allox/mkimage/internal/attest"
)

func load(t *testing.T, ref string, private bool) *attestation.Key {
	t.Helper()
	k, err := attestation.LoadKey(ref, private)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// signed is an output directory signed with a fresh key of kind; it returns the directory and the
// public key's path.
func signed(t *testing.T, kind string) (string, string) {
	t.Helper()
	dir, o := outputDir(t)
	priv, pub := attestationtest.KeyFiles(t, kind)
	o.Key = load(t, priv, true)
	if err := attest.Attest(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	return dir, pub
}

// Sign and verify round trip with both key types; the statement names every output and the
// manifest, and the SLSA predicate the spec, the source tree and the modules.
func TestSignVerifyRoundTrip(t *testing.T) {
	for _, kind := range []string{"ed25519", "p256"} {
		t.Run(kind, func(t *testing.T) {
			dir, pub := signed(t, kind)
			st, err := attest.Verify(context.Background(), dir, load(t, pub, false))
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, s := range st.GetSubject() {
				names = append(names, s.GetName())
			}
			if got, want := strings.Join(names, " "), "bzImage kata/install.sh manifest.json rootfs.img sbom.spdx.json"; got != want {
				t.Errorf("subjects %q, want %q", got, want)
			}
			pred, _ := json.Marshal(st.GetPredicate())
			for _, want := range []string{`"buildType":"urn:allox-os:mkimage:build:v1"`, `"gitTree":"0ab2d1f464d5fdd06d74f0eff4066ace3fac7d08"`,
				`"sourceDateEpoch":1700000000`, `"goSum":"h1:abc="`, `"file":"$SRC/images/allox.hcl"`, `"id":"urn:allox-os:mkimage"`} {
				if !bytes.Contains(pred, []byte(want)) {
					t.Errorf("predicate lacks %s", want)
				}
			}
		})
	}
}

// Signing the same build twice with the same ed25519 key gives the same bytes.
func TestAttestDeterministic(t *testing.T) {
	dir, o := outputDir(t)
	priv, _ := attestationtest.KeyFiles(t, "ed25519")
	o.Key = load(t, priv, true)
	var got [][]byte
	for range 2 {
		if err := attest.Attest(context.Background(), o); err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(attestation.File(dir))
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, data)
	}
	if !bytes.Equal(got[0], got[1]) {
		t.Error("two attestations of the same build differ")
	}
}

// rewrite changes the envelope of dir.
func rewrite(t *testing.T, dir string, edit func(e *dsse.Envelope)) {
	t.Helper()
	e, err := attestation.ReadEnvelope(attestation.File(dir))
	if err != nil {
		t.Fatal(err)
	}
	edit(e)
	data, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, attestation.File(dir), append(data, '\n'))
}

// editPayload rewrites the signed statement (keeping the signature).
func editPayload(t *testing.T, e *dsse.Envelope, old, new string) {
	t.Helper()
	p, err := base64.StdEncoding.DecodeString(e.Payload)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(p, []byte(old)) {
		t.Fatalf("the statement has no %q", old)
	}
	e.Payload = base64.StdEncoding.EncodeToString(bytes.Replace(p, []byte(old), []byte(new), 1))
}

// Each refusal of Verify, one attack per case, with its own error and message.
func TestVerifyRefuses(t *testing.T) {
	for _, tc := range []struct {
		name   string
		attack func(t *testing.T, dir, pub string) string // returns the trusted key
		want   error
		msg    string
	}{{
		name: "missing attestation",
		attack: func(t *testing.T, dir, pub string) string {
			os.Remove(attestation.File(dir))
			return pub
		},
		want: attestation.ErrMissing, msg: "attestation.intoto.jsonl does not exist",
	}, {
		name: "missing signature",
		attack: func(t *testing.T, dir, pub string) string {
			rewrite(t, dir, func(e *dsse.Envelope) { e.Signatures = nil })
			return pub
		},
		want: attestation.ErrUnsigned, msg: "the envelope has no signature",
	}, {
		name: "wrong key",
		attack: func(t *testing.T, dir, pub string) string {
			_, other := attestationtest.KeyFiles(t, "ed25519")
			return other
		},
		want: attestation.ErrOtherKey, msg: "signed by another key: it is signed by keyid",
	}, {
		name: "signed by another key claiming the trusted key's id",
		attack: func(t *testing.T, dir, pub string) string {
			otherDir, _ := signed(t, "ed25519")
			forged, err := attestation.ReadEnvelope(attestation.File(otherDir))
			if err != nil {
				t.Fatal(err)
			}
			rewrite(t, dir, func(e *dsse.Envelope) { e.Signatures[0].Sig = forged.Signatures[0].Sig })
			return pub
		},
		want: attestation.ErrSignature, msg: "the statement or its signature changed after signing",
	}, {
		name: "tampered statement",
		attack: func(t *testing.T, dir, pub string) string {
			rewrite(t, dir, func(e *dsse.Envelope) {
				editPayload(t, e, `"sourceDateEpoch": 1700000000`, `"sourceDateEpoch": 1700000001`)
			})
			return pub
		},
		want: attestation.ErrSignature, msg: "attestation signature does not verify with the trusted key",
	}, {
		name: "tampered output",
		attack: func(t *testing.T, dir, pub string) string {
			writeFile(t, filepath.Join(dir, "rootfs.img"), []byte("another disk image\n"))
			return pub
		},
		want: attestation.ErrSubject, msg: "rootfs.img: sha256 ",
	}, {
		name: "missing output",
		attack: func(t *testing.T, dir, pub string) string {
			os.Remove(filepath.Join(dir, "bzImage"))
			return pub
		},
		want: attestation.ErrSubject, msg: "bzImage: missing from",
	}, {
		name: "output that is no subject",
		attack: func(t *testing.T, dir, pub string) string {
			writeFile(t, filepath.Join(dir, "kata", "extra.toml"), []byte("x = 1\n"))
			return pub
		},
		want: attestation.ErrSubject, msg: "kata/extra.toml: not a subject of the attestation",
	}, {
		name: "garbage envelope",
		attack: func(t *testing.T, dir, pub string) string {
			writeFile(t, attestation.File(dir), []byte("{\"payloadType\": 3}\n"))
			return pub
		},
		want: attestation.ErrMalformed, msg: "attestation malformed",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			dir, pub := signed(t, "ed25519")
			trusted := tc.attack(t, dir, pub)
			_, err := attest.Verify(context.Background(), dir, load(t, trusted, false))
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("Verify: %v; want %v with %q", err, tc.want, tc.msg)
			}
		})
	}
}

// A statement signed by the trusted key whose subject points outside the output directory is
// refused before any file is read.
func TestVerifyRefusesSubjectOutsideDir(t *testing.T) {
	dir, _ := outputDir(t)
	priv, pub := attestationtest.KeyFiles(t, "ed25519")
	st := []byte(`{"_type": "https://in-toto.io/Statement/v1", "subject": [{"name": "../../etc/shadow", "digest": {"sha256": "` +
		strings.Repeat("0", 64) + `"}}], "predicateType": "https://slsa.dev/provenance/v1", "predicate": {}}`)
	if err := attestation.Write(context.Background(), dir, st, load(t, priv, true)); err != nil {
		t.Fatal(err)
	}
	_, err := attest.Verify(context.Background(), dir, load(t, pub, false))
	if !errors.Is(err, attestation.ErrMalformed) || !strings.Contains(err.Error(), `subject "../../etc/shadow" must be a path inside`) {
		t.Fatalf("Verify: %v; want the subject refused", err)
	}
}

func TestLoadKey(t *testing.T) {
	edPriv, edPub := attestationtest.KeyFiles(t, "ed25519")
	p384, _ := attestationtest.KeyFiles(t, "p384")
	rsaKey, _ := attestationtest.KeyFiles(t, "rsa")
	pemText, err := os.ReadFile(edPriv)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("ALLOX_TEST_SIGNING_KEY", string(pemText))
	t.Setenv("ALLOX_TEST_EMPTY", "")
	fromFile, fromEnv := load(t, edPriv, true), load(t, "env://ALLOX_TEST_SIGNING_KEY", true)
	a, _ := fromFile.KeyID()
	b, _ := fromEnv.KeyID()
	if c, _ := load(t, edPub, false).KeyID(); a != b || a != c || !strings.HasPrefix(a, "sha256:") {
		t.Errorf("key ids: file %s, env %s, public %s; want one", a, b, c)
	}
	for _, tc := range []struct {
		ref     string
		private bool
		msg     string
	}{
		{"", true, "no key given: pass --key FILE"},
		{"env://ALLOX_TEST_EMPTY", true, "the environment variable ALLOX_TEST_EMPTY is empty or unset"},
		{edPub, true, "a PUBLIC KEY cannot sign: give the private key"},
		{p384, true, "ECDSA on P-384 is not supported: use P-256"},
		{rsaKey, true, "rsa keys are not supported: use ed25519 or ECDSA P-256"},
		{"/nonexistent.pem", false, "no such file"},
	} {
		if _, err := attestation.LoadKey(tc.ref, tc.private); err == nil || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("LoadKey(%q): %v; want %q", tc.ref, err, tc.msg)
		}
	}
}

// Attest refuses a spec other than the one the manifest records, and outputs changed since.
func TestAttestRefuses(t *testing.T) {
	priv, _ := attestationtest.KeyFiles(t, "ed25519")
	_, o := outputDir(t)
	o.Key = load(t, priv, true)
	o.SpecText = append(o.SpecText, '\n')
	if err := attest.Attest(context.Background(), o); err == nil || !strings.Contains(err.Error(), "attest from the checkout and spec that built") {
		t.Errorf("attest with another spec: %v", err)
	}
	dir, o := outputDir(t)
	o.Key = load(t, priv, true)
	writeFile(t, filepath.Join(dir, "bzImage"), []byte("changed\n"))
	if err := attest.Attest(context.Background(), o); err == nil || !strings.Contains(err.Error(), "changed after the build (bzImage: changed") {
		t.Errorf("attest of a changed output: %v", err)
	}
	if _, err := os.Stat(attestation.File(dir)); !os.IsNotExist(err) {
		t.Errorf("the refused attest wrote %s", attestation.File(dir))
	}
}
