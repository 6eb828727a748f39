package cli

import (
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/registry"

	"github.com/allox-os/allox/deploy/fleet"
	"github.com/allox-os/allox/internal/attestation/attestationtest"
	"github.com/allox-os/allox/internal/testenv"
)

// copyPayload copies from a real build the files mkimage push publishes (not vmlinux and the
// other outputs a node does not need), so the test can write allox-deploy.yaml beside them.
func copyPayload(t *testing.T, out string) string {
	t.Helper()
	return copyFiles(t, out, []string{"manifest.json", "sbom.spdx.json", "bzImage", "rootfs.img", "initramfs.cpio.gz", "kata/*", "kata/*/*", "kata/*/*/*"})
}

// copyFiles copies the regular files of out matching patterns, but those named in skip, into a
// temporary directory, keeping their relative paths and modes.
func copyFiles(t *testing.T, out string, patterns []string, skip ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, pattern := range patterns {
		matches, err := filepath.Glob(filepath.Join(out, pattern))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range matches {
			st, err := os.Stat(m)
			r, _ := filepath.Rel(out, m)
			if err != nil || st.IsDir() || slices.Contains(skip, r) {
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

// mkimage push publishes a real build to an in-process registry, prints the digest-pinned
// reference and writes the DaemonSet pinned to it; pushing again prints the same reference.
func TestPush(t *testing.T) {
	out := copyPayload(t, testenv.NeedOut(t, "manifest.json", "kata/install.sh", "bzImage"))
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	ref := strings.TrimPrefix(srv.URL, "http://") + "/allox/allox:test"
	var pinned []string
	for range 2 {
		code, stdout, stderr := run(t, "push", "-out", out, "-insecure", "-verify-key", "none", ref)
		if code != 0 {
			t.Fatalf("mkimage push: exit %d\n%s", code, stderr)
		}
		t.Logf("mkimage push: %s%s", stdout, stderr)
		pinned = append(pinned, strings.TrimSpace(stdout))
	}
	if !strings.Contains(pinned[0], "/allox/allox@sha256:") || pinned[0] != pinned[1] {
		t.Fatalf("mkimage push printed %q then %q: want one digest-pinned reference", pinned[0], pinned[1])
	}
	ds, err := os.ReadFile(filepath.Join(out, fleet.DaemonSetFile))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(ds), "image: "+pinned[0]+"\n") {
		t.Errorf("%s does not run %s", fleet.DaemonSetFile, pinned[0])
	}
}

func TestPushUsage(t *testing.T) {
	if code, _, stderr := run(t, "push", "-out", t.TempDir()); code != 2 || !strings.Contains(stderr, "usage: mkimage push") {
		t.Errorf("push without REF: exit %d, %q; want the usage", code, stderr)
	}
	code, _, stderr := run(t, "push", "-out", t.TempDir(), "-verify-key", "none", "localhost:1/x:y")
	if code != 1 || !strings.Contains(stderr, "manifest.json") {
		t.Errorf("push of a directory that is no build: exit %d, %q; want an error naming manifest.json", code, stderr)
	}
}

// A signed build is pushed with its attestation and the rollout requires the key on every node;
// a build the key did not sign is refused before anything is pushed, and so is a push that does not
// say which key the nodes trust.
func TestPushSigned(t *testing.T) {
	dir := copyOutputs(t, testenv.NeedOut(t, "manifest.json", "kata/install.sh", "bzImage"))
	priv, pub := attestationtest.KeyFiles(t, "ed25519")
	if code, stdout, stderr := run(t, "attest", dir, "--key", priv); code != 0 {
		t.Fatalf("attest: exit %d\n%s%s", code, stdout, stderr)
	}
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	ref := strings.TrimPrefix(srv.URL, "http://") + "/allox/allox:signed"
	_, other := attestationtest.KeyFiles(t, "ed25519")
	if code, stdout, stderr := run(t, "push", "-out", dir, "-insecure", "-verify-key", other, ref); code != 1 ||
		!strings.Contains(stderr, "attestation signed by another key") || stdout != "" {
		t.Errorf("push with a key that did not sign: exit %d, %q %q", code, stdout, stderr)
	}
	if code, _, stderr := run(t, "push", "-out", dir, "-insecure", ref); code != 1 || !strings.Contains(stderr, "no trusted key: pass -verify-key") {
		t.Errorf("push without -verify-key: exit %d, %q", code, stderr)
	}
	code, stdout, stderr := run(t, "push", "-out", dir, "-insecure", "-verify-key", pub, ref)
	if code != 0 {
		t.Fatalf("push -verify-key: exit %d\n%s", code, stderr)
	}
	ds, err := os.ReadFile(filepath.Join(dir, fleet.DaemonSetFile))
	if err != nil {
		t.Fatal(err)
	}
	pemText, _ := os.ReadFile(pub)
	if !strings.Contains(string(ds), "-verify-key=/etc/allox-deploy/trusted.pub") || !strings.Contains(string(ds), strings.Split(string(pemText), "\n")[1]) {
		t.Errorf("%s does not require the trusted key:\n%s", fleet.DaemonSetFile, ds)
	}
	t.Logf("pushed %s", stdout)
}
