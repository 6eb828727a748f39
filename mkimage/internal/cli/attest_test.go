package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/allox-os/allox/internal/attestation/attestationtest"
	"github.com/allox-os/allox/internal/testenv"
)

// mkimage attest signs a copy of a real build (the key from an environment variable); mkimage
// verify --key accepts it, and refuses it with another key and once an output changed, each with
// its message.
func TestAttestVerifyCommands(t *testing.T) {
	out := testenv.NeedOut(t, "manifest.json", "kata/install.sh", "bzImage")
	dir := copyOutputs(t, out)
	priv, pub := attestationtest.KeyFiles(t, "ed25519")
	pemText, _ := os.ReadFile(priv)
	t.Setenv("ALLOX_TEST_KEY", string(pemText))
	if code, stdout, stderr := run(t, "attest", dir, "--key", "env://ALLOX_TEST_KEY"); code != 0 || !strings.Contains(stdout, "signed "+dir) {
		t.Fatalf("attest: exit %d\n%s%s", code, stdout, stderr)
	}
	if code, stdout, stderr := run(t, "verify", dir, "--key", pub); code != 0 || !strings.Contains(stdout, "and the attestation signed by") {
		t.Fatalf("verify --key: exit %d\n%s%s", code, stdout, stderr)
	}
	_, other := attestationtest.KeyFiles(t, "ed25519")
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

// copyOutputs copies every output of a build (not the nested builds, nor what launchers and
// mkimage push and attest leave there) into a temporary directory.
func copyOutputs(t *testing.T, out string) string {
	t.Helper()
	return copyFiles(t, out, []string{"*", "kata/*", "kata/*/*", "kata/*/*/*"}, "workspace.img", "allox-deploy.yaml", "attestation.intoto.jsonl")
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
