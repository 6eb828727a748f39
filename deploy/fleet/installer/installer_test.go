package installer_test

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

	"github.com/BurntSushi/toml"

	"github.com/allox-os/allox/deploy/fleet/installer"
	"github.com/allox-os/allox/deploy/fleet/internal/fleettest"
	"github.com/allox-os/allox/deploy/fleet/internal/payload"
	"github.com/allox-os/allox/internal/attestation"
)

const mainConfigV3 = `version = 3
root = "/var/lib/containerd"

[plugins."io.containerd.cri.v1.runtime".containerd]
  default_runtime_name = "runc"
`

const mainConfigV2 = `version = 2

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.10"
`

const mainConfigConfD = `version = 3
imports = ["/etc/containerd/conf.d/*.toml"]
`

func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var log bytes.Buffer
	err := installer.Run(context.Background(), args, &log)
	t.Logf("allox-deploy %s:\n%s", strings.Join(args, " "), log.String())
	return log.String(), err
}

func flags(t *testing.T, root, pl string) []string {
	return []string{"-root", root, "-payload", pl, "-restart-containerd=false", "-label-node=false", "-verify-key", fleettest.TrustedKey(t, pl)}
}

// Install then cleanup on a scratch host root, with the real install.sh run by the real shell
// through chroot: Kata's configuration points at the installed guest, containerd has the runtime
// handlers (a drop-in where config.toml imports conf.d, appended otherwise, in the config version
// config.toml uses), and after cleanup the tree is exactly as before (modes and hashes).
func TestInstallCleanupScratchRoot(t *testing.T) {
	for _, tc := range []struct {
		name, config, plugin, handlersIn string
	}{
		{"containerd 2.x appended", mainConfigV3, "io.containerd.cri.v1.runtime", "etc/containerd/config.toml"},
		{"containerd 1.7 appended", mainConfigV2, "io.containerd.grpc.v1.cri", "etc/containerd/config.toml"},
		{"containerd 2.2 conf.d", mainConfigConfD, "io.containerd.cri.v1.runtime", "etc/containerd/conf.d/50-allox-allox.toml"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := fleettest.ScratchRoot(t, tc.config)
			pl := fleettest.Out(t, "allox")
			before := fleettest.Listing(t, root)
			// Twice, as a restarted pod does: the second install first cleans up the first.
			for range 2 {
				if _, err := run(t, append([]string{"install", "-once"}, flags(t, root, pl)...)...); err != nil {
					t.Fatal(err)
				}
			}
			fleettest.CheckInstalled(t, root, "/etc/kata-containers/allox", pl)
			if _, err := run(t, append([]string{"status"}, flags(t, root, pl)...)...); err != nil {
				t.Errorf("status after install: %v", err)
			}
			// containerd's handler names a Kata configuration that exists, beside the drop-in.
			var cfg map[string]any
			if _, err := toml.Decode(fleettest.ReadFile(t, filepath.Join(root, tc.handlersIn)), &cfg); err != nil {
				t.Fatal(err)
			}
			handler := dig(cfg, "plugins", tc.plugin, "containerd", "runtimes", "allox", "options")
			configPath, _ := handler["ConfigPath"].(string)
			if configPath != "/etc/kata-containers/allox/runtime-rs/configuration-qemu-runtime-rs.toml" {
				t.Fatalf("%s: runtime allox's ConfigPath is %q", tc.handlersIn, configPath)
			}
			for _, p := range []string{configPath, "/etc/kata-containers/allox/runtime-rs/config.d/50-allox.toml", "/etc/kata-containers/allox/config.d/50-allox.toml"} {
				if _, err := os.Stat(filepath.Join(root, p)); err != nil {
					t.Errorf("installed Kata configuration: %v", err)
				}
			}
			if tc.handlersIn != "etc/containerd/config.toml" && fleettest.ReadFile(t, filepath.Join(root, "etc/containerd/config.toml")) != tc.config {
				t.Errorf("config.toml changed although it imports conf.d")
			}
			if _, err := run(t, append([]string{"cleanup"}, flags(t, root, pl)...)...); err != nil {
				t.Fatal(err)
			}
			if d := fleettest.DiffListing(before, fleettest.Listing(t, root)); d != "" {
				t.Errorf("after cleanup the scratch root is not as before:\n%s", d)
			}
			if _, err := run(t, append([]string{"status"}, flags(t, root, pl)...)...); !errors.Is(err, installer.ErrNotInstalled) {
				t.Errorf("status after cleanup: %v, want %v", err, installer.ErrNotInstalled)
			}
		})
	}
}

func dig(m map[string]any, keys ...string) map[string]any {
	for _, k := range keys {
		m, _ = m[k].(map[string]any)
	}
	return m
}

// A payload file whose bytes differ from manifest.json: the installer refuses, names the file, and
// writes nothing at all on the host.
func TestInstallRefusesTamperedPayload(t *testing.T) {
	root := fleettest.ScratchRoot(t, mainConfigV3)
	pl := fleettest.Out(t, "allox")
	if err := os.WriteFile(filepath.Join(pl, "kata/install.sh"), []byte("#!/bin/sh\nrm -rf /etc\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	before := fleettest.Listing(t, root)
	_, err := run(t, append([]string{"install", "-once"}, flags(t, root, pl)...)...)
	if !errors.Is(err, payload.ErrMismatch) || !strings.Contains(err.Error(), "kata/install.sh: sha256") {
		t.Fatalf("install of a changed install.sh: %v; want a refusal naming kata/install.sh", err)
	}
	if d := fleettest.DiffListing(before, fleettest.Listing(t, root)); d != "" {
		t.Errorf("the refused install wrote to the host:\n%s", d)
	}
}

// An install that fails halfway (no Kata on the node: install.sh finds none of its shipped
// configurations) is rolled back: the host is as before.
func TestInstallFailureRolledBack(t *testing.T) {
	root := fleettest.ScratchRoot(t, mainConfigV3)
	if err := os.RemoveAll(filepath.Join(root, "opt/kata")); err != nil {
		t.Fatal(err)
	}
	pl := fleettest.Out(t, "allox")
	before := fleettest.Listing(t, root)
	log, err := run(t, append([]string{"install", "-once"}, flags(t, root, pl)...)...)
	if err == nil || !strings.Contains(err.Error(), "rolled back") || !strings.Contains(log, "install Kata first") {
		t.Fatalf("install without Kata: %v; want install.sh's refusal, rolled back", err)
	}
	if d := fleettest.DiffListing(before, fleettest.Listing(t, root)); d != "" {
		t.Errorf("after the rollback the scratch root is not as before:\n%s", d)
	}
}

// A host whose /opt is an absolute symlink (/opt -> /var/opt, as image-based distributions have):
// the installer follows it inside the host root, as install.sh does through chroot, and never
// writes into the pod's own /var/opt; cleanup leaves the host as before.
func TestInstallFollowsHostSymlinksInsideRoot(t *testing.T) {
	root := fleettest.ScratchRoot(t, mainConfigV3)
	if err := os.MkdirAll(filepath.Join(root, "var"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(root, "opt"), filepath.Join(root, "var/opt")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/var/opt", filepath.Join(root, "opt")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/var/opt/allox", "/srv/allox-deploy"} {
		if _, err := os.Stat(p); err == nil {
			t.Fatalf("%s exists on this machine already: the test cannot tell where the installer wrote", p)
		}
	}
	// The state directory goes through a dangling host symlink too.
	if err := os.Mkdir(filepath.Join(root, "srv"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/srv/allox-deploy", filepath.Join(root, "var/lib/allox-deploy")); err != nil {
		t.Fatal(err)
	}
	pl := fleettest.Out(t, "allox")
	before := fleettest.Listing(t, root)
	if _, err := run(t, append([]string{"install", "-once"}, flags(t, root, pl)...)...); err != nil {
		t.Fatal(err)
	}
	fleettest.CheckInstalled(t, root, "/etc/kata-containers/allox", pl)
	if _, err := os.Stat(filepath.Join(root, "srv/allox-deploy/allox/out/manifest.json")); err != nil {
		t.Errorf("the staged payload is not where the host's /var/lib/allox-deploy points: %v", err)
	}
	for _, p := range []string{"/var/opt/allox", "/srv/allox-deploy"} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s was written on the machine running the installer, outside the host root", p)
		}
	}
	if _, err := run(t, append([]string{"cleanup"}, flags(t, root, pl)...)...); err != nil {
		t.Fatal(err)
	}
	if d := fleettest.DiffListing(before, fleettest.Listing(t, root)); d != "" {
		t.Errorf("after cleanup the scratch root is not as before:\n%s", d)
	}
}

// A cleanup that stops halfway (here install.sh --uninstall fails once, after the containerd
// handlers are already out) can be run again and then finishes: the host ends as before.
func TestCleanupCanBeRetried(t *testing.T) {
	root := fleettest.ScratchRoot(t, mainConfigV3)
	pl := fleettest.Out(t, "allox")
	before := fleettest.Listing(t, root)
	if _, err := run(t, append([]string{"install", "-once"}, flags(t, root, pl)...)...); err != nil {
		t.Fatal(err)
	}
	staged := filepath.Join(root, installer.StateRoot, "allox/out/kata/install.sh")
	good := fleettest.ReadFile(t, staged)
	if err := os.WriteFile(staged, []byte("#!/bin/sh\n# --uninstall, interrupted\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := run(t, append([]string{"cleanup"}, flags(t, root, pl)...)...); err == nil {
		t.Fatal("cleanup succeeded although install.sh --uninstall failed")
	}
	if strings.Contains(fleettest.ReadFile(t, filepath.Join(root, "etc/containerd/config.toml")), "allox-deploy") {
		t.Error("the failed cleanup left the containerd handlers in config.toml")
	}
	if err := os.WriteFile(staged, []byte(good), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := run(t, append([]string{"cleanup"}, flags(t, root, pl)...)...); err != nil {
		t.Fatal(err)
	}
	if d := fleettest.DiffListing(before, fleettest.Listing(t, root)); d != "" {
		t.Errorf("after the retried cleanup the scratch root is not as before:\n%s", d)
	}
}

// Each way the payload's attestation can fail is refused before anything is written on the host,
// with its own message: the Go check of allox-deploy, before install.sh (which checks again).
func TestInstallRefusesAttestation(t *testing.T) {
	for _, tc := range []struct {
		name   string
		attack func(t *testing.T, pl string) (trusted string)
		want   error
		msg    string
	}{{
		name: "attestation missing",
		attack: func(t *testing.T, pl string) string {
			os.Remove(filepath.Join(pl, "attestation.intoto.jsonl"))
			return fleettest.TrustedKey(t, pl)
		},
		want: attestation.ErrMissing, msg: "attestation missing: ",
	}, {
		name: "missing signature",
		attack: func(t *testing.T, pl string) string {
			editEnvelope(t, pl, func(e map[string]any) { e["signatures"] = nil })
			return fleettest.TrustedKey(t, pl)
		},
		want: attestation.ErrUnsigned, msg: "the envelope has no signature",
	}, {
		name: "wrong key",
		attack: func(t *testing.T, pl string) string {
			trusted := fleettest.TrustedKey(t, pl)
			fleettest.Resign(t, pl)
			return trusted
		},
		want: attestation.ErrOtherKey, msg: "attestation signed by another key",
	}, {
		name: "tampered statement",
		attack: func(t *testing.T, pl string) string {
			editEnvelope(t, pl, func(e map[string]any) {
				st, _ := base64.StdEncoding.DecodeString(e["payload"].(string))
				e["payload"] = base64.StdEncoding.EncodeToString(bytes.Replace(st, []byte(`"bzImage"`), []byte(`"bzImagf"`), 1))
			})
			return fleettest.TrustedKey(t, pl)
		},
		want: attestation.ErrSignature, msg: "the statement or its signature changed after signing",
	}, {
		name: "tampered output with its manifest",
		attack: func(t *testing.T, pl string) string {
			if err := os.WriteFile(filepath.Join(pl, "rootfs.img"), []byte("a backdoored image\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			fleettest.WriteManifest(t, pl, "allox") // manifest.json agrees: only the signed subjects catch it
			return fleettest.TrustedKey(t, pl)
		},
		want: attestation.ErrSubject, msg: "rootfs.img: sha256 ",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			root := fleettest.ScratchRoot(t, mainConfigV3)
			pl := fleettest.Out(t, "allox")
			trusted := tc.attack(t, pl)
			before := fleettest.Listing(t, root)
			args := append([]string{"install", "-once"}, flags(t, root, pl)...)
			args[len(args)-1] = trusted
			_, err := run(t, args...)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) || !strings.Contains(err.Error(), "nothing was installed") {
				t.Fatalf("install: %v; want %v with %q", err, tc.want, tc.msg)
			}
			if d := fleettest.DiffListing(before, fleettest.Listing(t, root)); d != "" {
				t.Errorf("the refused install wrote to the host:\n%s", d)
			}
		})
	}
}

// Without -verify-key the installer refuses and says how to choose; -verify-key none installs.
func TestInstallNeedsTrustDecision(t *testing.T) {
	root := fleettest.ScratchRoot(t, mainConfigV3)
	pl := fleettest.Out(t, "allox")
	base := []string{"install", "-once", "-root", root, "-payload", pl, "-restart-containerd=false", "-label-node=false"}
	if _, err := run(t, base...); err == nil || !strings.Contains(err.Error(), "no trusted key: pass -verify-key FILE") {
		t.Fatalf("install without -verify-key: %v", err)
	}
	log, err := run(t, append(base, "-verify-key", "none")...)
	if err != nil || !strings.Contains(log, "-verify-key none: the attestation is not checked") {
		t.Fatalf("install with -verify-key none: %v", err)
	}
	if _, err := run(t, append([]string{"cleanup"}, flags(t, root, pl)...)...); err != nil {
		t.Fatal(err)
	}
}

// editEnvelope rewrites the payload's attestation.
func editEnvelope(t *testing.T, pl string, edit func(e map[string]any)) {
	t.Helper()
	p := filepath.Join(pl, "attestation.intoto.jsonl")
	var e map[string]any
	if err := json.Unmarshal([]byte(fleettest.ReadFile(t, p)), &e); err != nil {
		t.Fatal(err)
	}
	edit(e)
	data, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, append(data, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
}
