package cli

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/allox-os/allox/internal/testenv"
)

// edKey writes an ed25519 key pair and returns the private and public PEM files.
func edKey(t *testing.T) (string, string) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	privDER, _ := x509.MarshalPKCS8PrivateKey(priv)
	pubDER, _ := x509.MarshalPKIXPublicKey(pub)
	dir := t.TempDir()
	p, q := filepath.Join(dir, "key.pem"), filepath.Join(dir, "pub.pem")
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: privDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(q, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}), 0o644); err != nil {
		t.Fatal(err)
	}
	return p, q
}

// mkimage attest signs a copy of a real build (the key from an environment variable); mkimage
// verify --key accepts it, and refuses it with another key and once an output changed, each with
// its message.
func TestAttestVerifyCommands(t *testing.T) {
	out := testenv.NeedOut(t, "manifest.json", "kata/install.sh", "bzImage")
	dir := copyOutputs(t, out)
	priv, pub := edKey(t)
	pemText, _ := os.ReadFile(priv)
	t.Setenv("ALLOX_TEST_KEY", string(pemText))
	if code, stdout, stderr := run(t, "attest", dir, "--key", "env://ALLOX_TEST_KEY"); code != 0 || !strings.Contains(stdout, "signed "+dir) {
		t.Fatalf("attest: exit %d\n%s%s", code, stdout, stderr)
	}
	if code, stdout, stderr := run(t, "verify", dir, "--key", pub); code != 0 || !strings.Contains(stdout, "and the attestation signed by") {
		t.Fatalf("verify --key: exit %d\n%s%s", code, stdout, stderr)
	}
	_, other := edKey(t)
	if code, _, stderr := run(t, "verify", dir, "--key", other); code != 1 || !strings.Contains(stderr, "attestation signed by another key") {
		t.Errorf("verify with another key: exit %d, %s", code, stderr)
	}
	if code, _, stderr := run(t, "verify", "--key", pub); code != 2 || !strings.Contains(stderr, "usage: mkimage verify DIR [--key PUB]") {
		t.Errorf("verify without DIR: exit %d, %s", code, stderr)
	}
	os.Remove(filepath.Join(dir, "attestation.intoto.jsonl"))
	if code, _, stderr := run(t, "verify", dir, "--key", pub); code != 1 || !strings.Contains(stderr, "attestation missing") {
		t.Errorf("verify without attestation: exit %d, %s", code, stderr)
	}
}

// copyOutputs copies every output of a build (not the nested builds) into a temporary directory.
func copyOutputs(t *testing.T, out string) string {
	t.Helper()
	dir := t.TempDir()
	for _, pattern := range []string{"*", "kata/*", "kata/*/*", "kata/*/*/*"} {
		matches, _ := filepath.Glob(filepath.Join(out, pattern))
		for _, m := range matches {
			st, err := os.Stat(m)
			r, _ := filepath.Rel(out, m)
			if err != nil || st.IsDir() || r == "workspace.img" || r == "allox-deploy.yaml" || r == "attestation.intoto.jsonl" {
				continue
			}
			data, err := os.ReadFile(m)
			if err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(dir, r)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, data, st.Mode().Perm()); err != nil {
				t.Fatal(err)
			}
		}
	}
	return dir
}

// mkimage rebuild needs an attestation, and says which is missing.
func TestRebuildCommandRefuses(t *testing.T) {
	if code, _, stderr := run(t, "rebuild"); code != 2 || !strings.Contains(stderr, "usage: mkimage rebuild [--key PUB] ATTESTATION") {
		t.Errorf("rebuild without an attestation: exit %d, %q", code, stderr)
	}
	missing := filepath.Join(t.TempDir(), "attestation.intoto.jsonl")
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	if code, _, stderr := run(t, "rebuild", missing); code != 1 || !strings.Contains(stderr, "attestation missing: "+missing+" does not exist") {
		t.Errorf("rebuild of a missing attestation: exit %d, %q", code, stderr)
	}
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Errorf("the refused rebuild left %s in TMPDIR", left[0].Name())
	}
}
