package payload_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/allox-os/allox/deploy/fleet/internal/fleettest"
	"github.com/allox-os/allox/deploy/fleet/internal/payload"
)

// The payload is what a node installs, nothing more: vmlinux, kernel.config and the like stay home.
func TestSelect(t *testing.T) {
	files, m, err := payload.Select(fleettest.Out(t, "allox"))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"attestation.intoto.jsonl", "bzImage", "kata/config.d/50-allox.toml", "kata/containerd/config-v2.toml", "kata/containerd/config-v3.toml",
		"kata/install.sh", "kata/runtime-rs/config.d/50-allox.toml", "kata/runtimeclass.yaml", "manifest.json", "rootfs.img", "sbom.spdx.json"}
	if d := cmp.Diff(want, files); d != "" {
		t.Errorf("payload (-want +got):\n%s", d)
	}
	if m.Image.Name != "allox" {
		t.Errorf("image name %q", m.Image.Name)
	}
}

// Each way a payload can disagree with its manifest is refused, naming the file.
func TestVerifyRefuses(t *testing.T) {
	for _, tc := range []struct {
		name, want string
		tamper     func(dir string) error
	}{
		{"changed file", "bzImage: sha256", func(d string) error { return os.WriteFile(filepath.Join(d, "bzImage"), []byte("x"), 0o644) }},
		{"added file", "kata/evil.sh: not listed", func(d string) error { return os.WriteFile(filepath.Join(d, "kata/evil.sh"), []byte("x"), 0o755) }},
		{"missing file", "rootfs.img: missing", func(d string) error { return os.Remove(filepath.Join(d, "rootfs.img")) }},
		{"symlink", "kata/link: not a regular file", func(d string) error { return os.Symlink("/etc/shadow", filepath.Join(d, "kata/link")) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := fleettest.Out(t, "allox")
			req, err := payload.Required(dir)
			if err != nil {
				t.Fatal(err)
			}
			if err := tc.tamper(dir); err != nil {
				t.Fatal(err)
			}
			_, err = payload.Verify(dir, req)
			if !errors.Is(err, payload.ErrMismatch) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Verify: %v; want an error containing %q", err, tc.want)
			}
		})
	}
}
