package kata

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/BurntSushi/toml"
	"github.com/google/go-cmp/cmp"

	"github.com/allox-os/allox/internal/attestation"
	"github.com/allox-os/allox/internal/attestation/attestationtest"
)

// These tests run the real install.sh with sh on real files: a build output directory written the
// way mkimage writes it, and a host tree (DESTDIR) with Kata's shipped configurations in their
// default place.

const confDir = "/etc/kata-containers/allox"

// buildOutput is one build's output directory: the artifacts, kata/ and manifest.json.
type buildOutput struct {
	dir, release string
	files        []File // RenderDeployment's, relative to kata/
	pub          string // the public key the attestation verifies with
}

// newBuildOutput writes a build output into dir whose kernel is kernel.
func newBuildOutput(t *testing.T, dir string, kernel []byte) buildOutput {
	t.Helper()
	type output struct {
		Path   string `json:"path"`
		Size   int    `json:"size"`
		SHA256 string `json:"sha256"`
	}
	var outputs []output
	add := func(rel string, data []byte, mode os.FileMode) {
		writeFile(t, filepath.Join(dir, filepath.FromSlash(rel)), data, mode)
		sum := sha256.Sum256(data)
		outputs = append(outputs, output{rel, len(data), hex.EncodeToString(sum[:])})
	}
	add("bzImage", kernel, 0o644)
	add("rootfs.img", bytes.Repeat([]byte{0, 1, 2, 3}, 4096), 0o644)
	release, err := ReleaseOf(filepath.Join(dir, "bzImage"), filepath.Join(dir, "rootfs.img"))
	if err != nil {
		t.Fatal(err)
	}
	d := deployment
	d.Release = release
	d.Assets.Kernel = InstallDir(d.Name) + "/" + release + "/bzImage"
	d.Assets.Image = InstallDir(d.Name) + "/" + release + "/rootfs.img"
	files, err := RenderDeployment(d)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		mode := os.FileMode(0o644)
		if f.Executable {
			mode = 0o755
		}
		add("kata/"+f.Name, f.Data, mode)
	}
	// mkimage's provenance manifest: inputs (with sha256 but no path) before the outputs.
	manifest := map[string]any{
		"image":   map[string]any{"name": "allox"},
		"inputs":  []map[string]any{{"kind": "patch", "name": "rootfs.img", "sha256": strings.Repeat("0", 64)}},
		"outputs": outputs,
	}
	data, err := json.MarshalIndent(manifest, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "manifest.json"), data, 0o644)
	key, pub := attestationtest.KeyPair(t, "ed25519")
	attestationtest.SignDir(t, dir, key)
	return buildOutput{dir: dir, release: release, files: files, pub: pub}
}

// kataConfig stands in for Kata's shipped configuration: valid TOML with the keys the drop-in
// overrides, Kata's default enable_annotations among them.
const kataConfig = `[hypervisor.qemu]
kernel = "/opt/kata/share/kata-containers/vmlinux.container"
image = "/opt/kata/share/kata-containers/kata-containers.img"
enable_annotations = ["enable_iommu", "kernel_params", "kernel_verity_params"]

[agent.kata]

[runtime]
`

// newHost makes a host tree: Kata installed (its shipped configurations in the default
// KATA_DEFAULTS), an /etc/kata-containers with a file of the operator's, an empty /opt/allox.
func newHost(t *testing.T) string {
	t.Helper()
	dest := filepath.Join(t.TempDir(), "host")
	for _, c := range []string{GoConfigFile, RuntimeRsConfig} {
		writeFile(t, filepath.Join(dest, KataDefaults, filepath.FromSlash(c)), []byte(kataConfig), 0o644)
	}
	writeFile(t, filepath.Join(dest, "etc/kata-containers/operator-notes.txt"), []byte("mine\n"), 0o600)
	if err := os.MkdirAll(filepath.Join(dest, "opt/allox"), 0o700); err != nil {
		t.Fatal(err)
	}
	return dest
}

func writeFile(t *testing.T, p string, data []byte, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

// shim makes every mv, cp, rm, rmdir, mkdir and chmod install.sh runs log its arguments and count
// itself; the killAt-th call (0: none) SIGKILLs install.sh's whole process group instead, a cp
// after writing half of its destination.
type shim struct{ dir, log, count string }

const shimScript = `#!/bin/sh
n=$(($(cat "$SHIM_COUNT") + 1))
echo "$n" >"$SHIM_COUNT"
echo "${0##*/} $*" >>"$SHIM_LOG"
if [ "$n" -eq "$SHIM_KILL_AT" ]; then
	if [ "${0##*/}" = cp ]; then
		head -c $(($(wc -c <"$1") / 2)) "$1" >"$2"
	fi
	kill -KILL 0
fi
exec "$SHIM_REAL/${0##*/}" "$@"
`

func newShim(t *testing.T) shim {
	t.Helper()
	root := t.TempDir()
	s := shim{dir: filepath.Join(root, "bin"), log: filepath.Join(root, "log"), count: filepath.Join(root, "count")}
	real := filepath.Join(root, "real")
	for _, d := range []string{s.dir, real} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(root, "shim"), []byte(shimScript), 0o755)
	for _, cmd := range []string{"mv", "cp", "rm", "rmdir", "mkdir", "chmod"} {
		p, err := exec.LookPath(cmd)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(p, filepath.Join(real, cmd)); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join(root, "shim"), filepath.Join(s.dir, cmd)); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// runOpts say how install.sh runs: through a shim, and with which umask.
type runOpts struct {
	shim   *shim
	killAt int
	umask  string
	verify string // ALLOX_VERIFY_KEY; "" is the build's own public key
}

// install runs sh out/kata/install.sh ARGS with DESTDIR=dest and the default KATA_DEFAULTS.
func install(t *testing.T, out buildOutput, dest string, o runOpts, args ...string) (string, error) {
	t.Helper()
	script := filepath.Join(out.dir, "kata", InstallSh)
	umask := o.umask
	if umask == "" {
		umask = "022"
	}
	cmd := exec.Command("sh", append([]string{"-c", `umask "$0"; exec sh "$@"`, umask, script}, args...)...)
	verify := o.verify
	if verify == "" {
		verify = out.pub
	}
	cmd.Env = append(os.Environ(), "DESTDIR="+dest)
	if verify != "unset" {
		cmd.Env = append(cmd.Env, "ALLOX_VERIFY_KEY="+verify)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if s := o.shim; s != nil {
		writeFile(t, s.count, []byte("0\n"), 0o644)
		writeFile(t, s.log, nil, 0o644)
		cmd.Env = append(cmd.Env, "PATH="+s.dir+":"+os.Getenv("PATH"), "SHIM_LOG="+s.log, "SHIM_COUNT="+s.count,
			"SHIM_REAL="+filepath.Join(filepath.Dir(s.dir), "real"), fmt.Sprintf("SHIM_KILL_AT=%d", o.killAt))
	}
	data, err := cmd.CombinedOutput()
	return string(data), err
}

func mustInstall(t *testing.T, out buildOutput, dest string, args ...string) {
	t.Helper()
	if msg, err := install(t, out, dest, runOpts{}, args...); err != nil {
		t.Fatalf("install.sh %q: %v\n%s", args, err, msg)
	}
}

// listing is every entry under dir: its path, type and permissions, and a file's sha256.
func listing(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		line := fmt.Sprintf("%s %v", filepath.ToSlash(rel), info.Mode())
		if info.Mode().IsRegular() {
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			line += fmt.Sprintf(" %x", sha256.Sum256(data))
		}
		out = append(out, line)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestInstallScript(t *testing.T) {
	out := newBuildOutput(t, filepath.Join(t.TempDir(), "out"), []byte("kernel A"))
	dest := newHost(t)
	mustInstall(t, out, dest, confDir)
	rel := "opt/allox/allox/" + out.release
	want := map[string]string{
		rel + "/bzImage":    "bzImage",
		rel + "/rootfs.img": "rootfs.img",
		"etc/kata-containers/allox/config.d/50-allox.toml":                        "kata/config.d/50-allox.toml",
		"etc/kata-containers/allox/runtime-rs/config.d/50-allox.toml":             "kata/runtime-rs/config.d/50-allox.toml",
		"etc/kata-containers/allox/configuration-qemu.toml":                       "=" + kataConfig,
		"etc/kata-containers/allox/runtime-rs/configuration-qemu-runtime-rs.toml": "=" + kataConfig,
	}
	for p, src := range want {
		got, err := os.ReadFile(filepath.Join(dest, p))
		if err != nil {
			t.Error(err)
			continue
		}
		wantData := []byte(strings.TrimPrefix(src, "="))
		if !strings.HasPrefix(src, "=") {
			if wantData, err = os.ReadFile(filepath.Join(out.dir, src)); err != nil {
				t.Fatal(err)
			}
		}
		if !bytes.Equal(got, wantData) {
			t.Errorf("%s differs from %s", p, src)
		}
	}
	// The Go runtime's drop-in names the installed files.
	var c config
	if _, err := toml.DecodeFile(filepath.Join(dest, confDir, GoRuntimeDropIn), &c); err != nil {
		t.Fatal(err)
	}
	if q := c.Hypervisor["qemu"]; q.Kernel != "/"+rel+"/bzImage" || q.Image != "/"+rel+"/rootfs.img" {
		t.Errorf("the drop-in names %s and %s; want the release directory /%s", q.Kernel, q.Image, rel)
	}
	// A configuration already in CONFIG_DIR is the operator's: an upgrade keeps it.
	own := filepath.Join(dest, confDir, GoConfigFile)
	writeFile(t, own, []byte("# tuned\n"), 0o640)
	mustInstall(t, newBuildOutput(t, filepath.Join(t.TempDir(), "out"), []byte("kernel B")), dest, confDir)
	if data, _ := os.ReadFile(own); string(data) != "# tuned\n" {
		t.Errorf("install.sh replaced the operator's configuration: %q", data)
	}
	if _, err := os.Stat(filepath.Join(dest, rel)); !os.IsNotExist(err) {
		t.Errorf("the upgrade left the previous release %s: %v", rel, err)
	}
}

// TestInstallModes installs under a permissive and a strict umask: configuration files are 0640,
// the artifacts 0644 and the directories install.sh creates 0755 either way.
func TestInstallModes(t *testing.T) {
	out := newBuildOutput(t, filepath.Join(t.TempDir(), "out"), []byte("kernel A"))
	for _, umask := range []string{"000", "077"} {
		dest := newHost(t)
		if msg, err := install(t, out, dest, runOpts{umask: umask}, confDir); err != nil {
			t.Fatalf("umask %s: %v\n%s", umask, err, msg)
		}
		rel := "opt/allox/allox/" + out.release
		for p, want := range map[string]fs.FileMode{
			"etc/kata-containers/allox":                     fs.ModeDir | installDirMode,
			"etc/kata-containers/allox/config.d":            fs.ModeDir | installDirMode,
			"etc/kata-containers/allox/runtime-rs/config.d": fs.ModeDir | installDirMode,
			"opt/allox/allox":                               fs.ModeDir | installDirMode,
			rel:                                             fs.ModeDir | installDirMode,
			rel + "/bzImage":                                artifactFileMode,
			rel + "/rootfs.img":                             artifactFileMode,
			"etc/kata-containers/allox/config.d/50-allox.toml":                        configFileMode,
			"etc/kata-containers/allox/runtime-rs/config.d/50-allox.toml":             configFileMode,
			"etc/kata-containers/allox/configuration-qemu.toml":                       configFileMode,
			"etc/kata-containers/allox/runtime-rs/configuration-qemu-runtime-rs.toml": configFileMode,
			"etc/kata-containers/allox/allox-allox.installed":                         configFileMode,
		} {
			st, err := os.Stat(filepath.Join(dest, p))
			if err != nil {
				t.Errorf("umask %s: %v", umask, err)
			} else if st.Mode() != want {
				t.Errorf("umask %s: %s has mode %v; want %v", umask, p, st.Mode(), want)
			}
		}
	}
}

// TestInstallStagesOutsideConfigD logs every cp and mv of an install and an upgrade: nothing is
// ever written into a config.d/ but by renaming a complete file from outside it onto a drop-in's
// name.
func TestInstallStagesOutsideConfigD(t *testing.T) {
	root := t.TempDir()
	a := newBuildOutput(t, filepath.Join(root, "a"), []byte("kernel A"))
	b := newBuildOutput(t, filepath.Join(root, "b"), []byte("kernel B"))
	dest, s := newHost(t), newShim(t)
	inConfigD := func(p string) bool { return strings.HasPrefix(p, dest) && strings.Contains(p, "/config.d/") }
	for _, out := range []buildOutput{a, b} {
		if msg, err := install(t, out, dest, runOpts{shim: &s}, confDir); err != nil {
			t.Fatalf("%v\n%s", err, msg)
		}
		log, err := os.ReadFile(s.log)
		if err != nil {
			t.Fatal(err)
		}
		renamed := 0
		for _, line := range strings.Split(strings.TrimSpace(string(log)), "\n") {
			f := strings.Fields(line)
			args := slices.DeleteFunc(f[1:], func(a string) bool { return strings.HasPrefix(a, "-") })
			switch {
			case f[0] == "mv" && inConfigD(args[1]):
				if inConfigD(args[0]) || filepath.Base(args[1]) != "50-allox.toml" {
					t.Errorf("%q renames within config.d or onto another name", line)
				}
				renamed++
			case f[0] == "cp" && inConfigD(args[len(args)-1]),
				f[0] != "mv" && f[0] != "cp" && slices.ContainsFunc(args, inConfigD):
				t.Errorf("%q writes into config.d", line)
			}
		}
		if renamed != 2 {
			t.Errorf("%d drop-ins renamed into config.d; want 2:\n%s", renamed, log)
		}
	}
}

// TestInstallInterrupted SIGKILLs install.sh at its k-th mv, cp, rm, rmdir, mkdir or chmod, for
// every k (a cp killed halfway through its file), in an upgrade from an installed release A to B, a
// fresh install of B and an uninstall of B. After each kill both runtimes' configurations still
// parse, their config.d/ holds nothing but complete drop-ins (A's or B's), and those name
// artifacts that exist with the right contents. Run again, install.sh ends where an uninterrupted
// run would have, and uninstall then leaves the host as it was before anything was installed.
func TestInstallInterrupted(t *testing.T) {
	root := t.TempDir()
	a := newBuildOutput(t, filepath.Join(root, "a"), []byte("kernel A"))
	b := newBuildOutput(t, filepath.Join(root, "b"), []byte("kernel B"))
	before := listing(t, newHost(t))
	ref := func(outs ...buildOutput) []string {
		dest := newHost(t)
		for _, out := range outs {
			mustInstall(t, out, dest, confDir)
		}
		return listing(t, dest)
	}
	for _, sc := range []struct {
		name      string
		installed []buildOutput // before the interrupted run
		args      []string      // of the interrupted run, and of the run that repairs it
		want      []string      // the listing after the repairing run
	}{
		{"upgrade", []buildOutput{a}, []string{confDir}, ref(a, b)},
		{"fresh install", nil, []string{confDir}, ref(b)},
		{"uninstall", []buildOutput{b}, []string{"--uninstall", confDir}, before},
	} {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			s := newShim(t)
			for k := 1; ; k++ {
				dest := newHost(t)
				for _, out := range sc.installed {
					mustInstall(t, out, dest, confDir)
				}
				msg, err := install(t, b, dest, runOpts{shim: &s, killAt: k}, sc.args...)
				if err == nil {
					if k < 10 {
						t.Fatalf("the run finished after only %d shimmed commands", k-1)
					}
					t.Logf("killed the run at each of its %d commands", k-1)
					break
				}
				if !strings.Contains(err.Error(), "killed") {
					t.Fatalf("k=%d: install.sh failed instead of being killed: %v\n%s", k, err, msg)
				}
				checkWorking(t, fmt.Sprintf("killed at command %d", k), dest, a, b)
				msg, err = install(t, b, dest, runOpts{}, sc.args...)
				got := listing(t, dest)
				if err != nil && sc.name == "uninstall" && strings.Contains(msg, ".installed is missing") {
					// Killed after it removed the record: at most the empty directories are left.
					got = slices.DeleteFunc(got, func(l string) bool { return !slices.Contains(before, l) && strings.Contains(l, " d") })
				} else if err != nil {
					t.Fatalf("k=%d: the repairing run: %v\n%s", k, err, msg)
				}
				if diff := cmp.Diff(sc.want, got); diff != "" {
					t.Errorf("k=%d: the repairing run differs from an uninterrupted one (-want +got):\n%s", k, diff)
				}
				if sc.name != "uninstall" {
					mustInstall(t, b, dest, "--uninstall", confDir)
					if diff := cmp.Diff(before, listing(t, dest)); diff != "" {
						t.Errorf("k=%d: uninstall did not restore the host (-before +after):\n%s", k, diff)
					}
				}
			}
		})
	}
}

// checkWorking checks that each runtime's configuration in dest is absent (nothing installed yet)
// or parses, with only a complete drop-in of one of the releases in its config.d/, naming that
// release's artifacts.
func checkWorking(t *testing.T, when, dest string, releases ...buildOutput) {
	t.Helper()
	for _, rt := range []struct{ config, dropIn string }{{GoConfigFile, GoRuntimeDropIn}, {RuntimeRsConfig, RuntimeRsDropIn}} {
		var c config
		dir := filepath.Join(dest, confDir, filepath.Dir(rt.dropIn))
		entries, err := os.ReadDir(dir)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		if _, err := toml.DecodeFile(filepath.Join(dest, confDir, rt.config), &c); os.IsNotExist(err) && len(entries) == 0 {
			continue
		} else if err != nil {
			t.Errorf("%s: %s does not parse: %v", when, rt.config, err)
		}
		if len(entries) == 0 {
			continue // Kata's own configuration, untouched
		}
		if len(entries) != 1 || entries[0].Name() != filepath.Base(rt.dropIn) {
			t.Errorf("%s: %s holds %v; want only %s", when, dir, entries, filepath.Base(rt.dropIn))
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, entries[0].Name()))
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(releases, func(r buildOutput) bool { return bytes.Equal(file(t, r.files, rt.dropIn), data) })
		if i < 0 {
			t.Errorf("%s: %s is no release's complete drop-in:\n%s", when, rt.dropIn, data)
			continue
		}
		if _, err := toml.Decode(string(data), &c); err != nil {
			t.Errorf("%s: %s: %v", when, rt.dropIn, err)
		}
		q := c.Hypervisor["qemu"]
		for _, p := range []string{q.Kernel, q.Image} {
			got, err := os.ReadFile(filepath.Join(dest, p))
			if err != nil {
				t.Errorf("%s: %s names %s: %v", when, rt.dropIn, p, err)
				continue
			}
			want, err := os.ReadFile(filepath.Join(releases[i].dir, filepath.Base(p)))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s: %s names %s, which is not release %s's %s", when, rt.dropIn, p, releases[i].release, filepath.Base(p))
			}
		}
	}
}

// TestUninstall installs onto a host where the operator already keeps a Go runtime configuration
// in CONFIG_DIR, then uninstalls: the host is as before, the operator's configuration untouched. A
// copy of Kata's configuration the operator changed after install is kept.
func TestUninstall(t *testing.T) {
	out := newBuildOutput(t, filepath.Join(t.TempDir(), "out"), []byte("kernel A"))
	dest := newHost(t)
	writeFile(t, filepath.Join(dest, confDir, GoConfigFile), []byte("# the operator's\n"), 0o600)
	before := listing(t, dest)
	mustInstall(t, out, dest, confDir)
	mustInstall(t, out, dest, confDir) // a re-install changes nothing uninstall must know
	mustInstall(t, out, dest, "--uninstall", confDir)
	if diff := cmp.Diff(before, listing(t, dest)); diff != "" {
		t.Errorf("uninstall did not restore the host (-before +after):\n%s", diff)
	}

	mustInstall(t, out, dest, confDir)
	tuned := filepath.Join(dest, confDir, RuntimeRsConfig)
	appendTo(t, tuned, "# tuned\n")
	msg, err := install(t, out, dest, runOpts{}, "--uninstall", confDir)
	if err != nil {
		t.Fatalf("%v\n%s", err, msg)
	}
	if !strings.Contains(msg, "kept "+tuned+": it changed since install.sh copied it from Kata") {
		t.Errorf("uninstall did not say it kept the changed configuration:\n%s", msg)
	}
	if data, err := os.ReadFile(tuned); err != nil || !strings.HasSuffix(string(data), "# tuned\n") {
		t.Errorf("uninstall removed the changed configuration: %v", err)
	}
}

func TestInstallScriptRefuses(t *testing.T) {
	for _, tt := range []struct {
		name   string
		spoil  func(t *testing.T, out buildOutput, dest string)
		args   []string
		verify string // ALLOX_VERIFY_KEY: "" the build's key, "none" for the manifest's own checks
		want   []string
	}{{
		name: "flipped byte", verify: "none",
		spoil: func(t *testing.T, out buildOutput, _ string) {
			p := filepath.Join(out.dir, "rootfs.img")
			data, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			data[len(data)/2] ^= 0x01
			writeFile(t, p, data, 0o644)
		},
		want: []string{"rootfs.img: sha256", "does not match manifest.json's"},
	}, {
		name: "changed drop-in", verify: "none",
		spoil: func(t *testing.T, out buildOutput, _ string) {
			appendTo(t, filepath.Join(out.dir, "kata/runtime-rs/config.d/50-allox.toml"), "x = 1\n")
		},
		want: []string{"kata/runtime-rs/config.d/50-allox.toml: sha256"},
	}, {
		name:  "missing file",
		spoil: func(t *testing.T, out buildOutput, _ string) { remove(t, filepath.Join(out.dir, "bzImage")) },
		want:  []string{"bzImage: missing from"},
	}, {
		name:  "missing manifest",
		spoil: func(t *testing.T, out buildOutput, _ string) { remove(t, filepath.Join(out.dir, "manifest.json")) },
		want:  []string{"manifest.json is missing"},
	}, {
		name: "attestation missing",
		spoil: func(t *testing.T, out buildOutput, _ string) {
			remove(t, filepath.Join(out.dir, "attestation.intoto.jsonl"))
		},
		want: []string{"attestation missing: ", "attestation.intoto.jsonl does not exist"},
	}, {
		name: "attestation unsigned",
		spoil: func(t *testing.T, out buildOutput, _ string) {
			editEnvelope(t, out, func(e map[string]any) { e["signatures"] = []any{} })
		},
		want: []string{"attestation unsigned: ", "has no signature"},
	}, {
		name:   "attestation signed by another key",
		verify: "other",
		want:   []string{"attestation signed by another key: ", "is signed by keyid sha256:", "but the trusted key"},
	}, {
		name: "signature of another key under the trusted key's id",
		spoil: func(t *testing.T, out buildOutput, _ string) {
			key, _ := attestationtest.KeyPair(t, "ed25519")
			attestationtest.SignDir(t, out.dir, key) // the same statement, signed by another key
			editEnvelope(t, out, func(e map[string]any) {
				e["signatures"].([]any)[0].(map[string]any)["keyid"] = keyID(t, out.pub)
			})
		},
		want: []string{"attestation signature does not verify with the trusted key", "changed after signing"},
	}, {
		name: "tampered statement",
		spoil: func(t *testing.T, out buildOutput, _ string) {
			editEnvelope(t, out, func(e map[string]any) {
				st, err := base64.StdEncoding.DecodeString(e["payload"].(string))
				if err != nil {
					t.Fatal(err)
				}
				st = bytes.Replace(st, []byte(`"name": "rootfs.img"`), []byte(`"name": "rootfs.iso"`), 1)
				e["payload"] = base64.StdEncoding.EncodeToString(st)
			})
		},
		want: []string{"attestation signature does not verify with the trusted key"},
	}, {
		name: "output and manifest changed together",
		spoil: func(t *testing.T, out buildOutput, _ string) {
			// The manifest's checks alone would pass: the attack is caught by the signed subjects.
			p := filepath.Join(out.dir, "rootfs.img")
			writeFile(t, p, []byte("a backdoored image"), 0o644)
			m := readFile(t, filepath.Join(out.dir, "manifest.json"))
			var man map[string]any
			if err := json.Unmarshal(m, &man); err != nil {
				t.Fatal(err)
			}
			for _, o := range man["outputs"].([]any) {
				if o := o.(map[string]any); o["path"] == "rootfs.img" {
					o["sha256"] = fmt.Sprintf("%x", sha256.Sum256([]byte("a backdoored image")))
				}
			}
			data, _ := json.MarshalIndent(man, "", "  ")
			writeFile(t, filepath.Join(out.dir, "manifest.json"), data, 0o644)
		},
		want: []string{"attestation subject mismatch: manifest.json: sha256 ", "the file changed after signing"},
	}, {
		name:   "no trusted key",
		verify: "unset",
		want:   []string{"ALLOX_VERIFY_KEY is not set: set it to the PEM public key whose signature you trust"},
	}, {
		name: "no Kata configuration",
		spoil: func(t *testing.T, _ buildOutput, dest string) {
			remove(t, filepath.Join(dest, KataDefaults, GoConfigFile))
		},
		want: []string{"configuration-qemu.toml: in neither"},
	}, {
		name: "relative config dir",
		args: []string{"etc/kata"},
		want: []string{"CONFIG_DIR etc/kata is relative"},
	}, {
		name: "config dir with a space",
		args: []string{"/etc/kata containers"},
		want: []string{"contains white space"},
	}, {
		name: "no argument",
		args: []string{},
		want: []string{"usage: sh install.sh [--uninstall] CONFIG_DIR"},
	}, {
		name: "uninstall of nothing",
		args: []string{"--uninstall", confDir},
		want: []string{"allox-allox.installed is missing: install.sh installed nothing into " + confDir},
	}} {
		t.Run(tt.name, func(t *testing.T) {
			out := newBuildOutput(t, filepath.Join(t.TempDir(), "out"), []byte("kernel A"))
			dest := newHost(t)
			if tt.spoil != nil {
				tt.spoil(t, out, dest)
			}
			before := listing(t, dest)
			args := tt.args
			if args == nil {
				args = []string{confDir}
			}
			verify := tt.verify
			switch verify {
			case "other":
				_, verify = attestationtest.KeyPair(t, "ed25519")
			}
			msg, err := install(t, out, dest, runOpts{verify: verify}, args...)
			if err == nil {
				t.Fatalf("install.sh succeeded:\n%s", msg)
			}
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("install.sh output lacks %q:\n%s", w, msg)
				}
			}
			if diff := cmp.Diff(before, listing(t, dest)); diff != "" {
				t.Errorf("install.sh refused but changed the host (-before +after):\n%s", diff)
			}
		})
	}
}

// editEnvelope rewrites the attestation of out.
func editEnvelope(t *testing.T, out buildOutput, edit func(e map[string]any)) {
	t.Helper()
	p := filepath.Join(out.dir, "attestation.intoto.jsonl")
	var e map[string]any
	if err := json.Unmarshal(readFile(t, p), &e); err != nil {
		t.Fatal(err)
	}
	edit(e)
	data, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, p, append(data, '\n'), 0o644)
}

// keyID is the key id install.sh computes for the PEM public key in pub.
func keyID(t *testing.T, pub string) string {
	t.Helper()
	k, err := attestation.LoadKey(pub, false)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := k.KeyID()
	return id
}

func readFile(t *testing.T, p string) []byte {
	t.Helper()
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func appendTo(t *testing.T, p, s string) {
	t.Helper()
	f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
}

func remove(t *testing.T, p string) {
	t.Helper()
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
}

// An attestation signed with an ECDSA P-256 key verifies as well (openssl dgst), and one whose
// statement changed does not; ALLOX_VERIFY_KEY=none installs without the check, and says so.
func TestInstallScriptAttestationKeys(t *testing.T) {
	out := newBuildOutput(t, filepath.Join(t.TempDir(), "out"), []byte("kernel A"))
	key, pub := attestationtest.KeyPair(t, "p256")
	attestationtest.SignDir(t, out.dir, key)
	out.pub = pub
	mustInstall(t, out, newHost(t), confDir)
	editEnvelope(t, out, func(e map[string]any) {
		st, _ := base64.StdEncoding.DecodeString(e["payload"].(string))
		e["payload"] = base64.StdEncoding.EncodeToString(bytes.Replace(st, []byte(`"kata/install.sh"`), []byte(`"kata/install.s"`), 1))
	})
	if msg, err := install(t, out, newHost(t), runOpts{}, confDir); err == nil || !strings.Contains(msg, "attestation signature does not verify") {
		t.Errorf("tampered ECDSA-signed statement: %v\n%s", err, msg)
	}
	msg, err := install(t, out, newHost(t), runOpts{verify: "none"}, confDir)
	if err != nil || !strings.Contains(msg, "ALLOX_VERIFY_KEY=none: the attestation is not checked") {
		t.Errorf("ALLOX_VERIFY_KEY=none: %v\n%s", err, msg)
	}
}
