package kata

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
	"github.com/google/go-cmp/cmp"
)

var deployment = Deployment{
	Name: "allox",
	Assets: Assets{
		Kernel:             "/opt/allox/allox/bzImage",
		Image:              "/opt/allox/allox/rootfs.img",
		RootfsType:         "ext4",
		KernelParams:       []string{"cgroup_no_v1=all"},
		DisableImageNvdimm: true,
		KernelVerityParams: testVerity,
		EnableAnnotations:  DefaultEnableAnnotations,
	},
}

func TestRenderDeploymentGolden(t *testing.T) {
	files, err := RenderDeployment(deployment)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		names = append(names, f.Name)
		golden := filepath.Join("testdata", "deployment", filepath.FromSlash(f.Name))
		if *update {
			if err := os.MkdirAll(filepath.Dir(golden), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(golden, f.Data, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(golden)
		if err != nil {
			t.Fatalf("%v (run go test ./deploy/kata -update to create it)", err)
		}
		if diff := cmp.Diff(string(want), string(f.Data)); diff != "" {
			t.Errorf("%s differs from %s (-golden +rendered; run with -update if intended):\n%s", f.Name, golden, diff)
		}
		if f.Executable != (f.Name == InstallSh) {
			t.Errorf("%s: Executable %v", f.Name, f.Executable)
		}
	}
	want := []string{GoRuntimeDropIn, RuntimeRsDropIn, ContainerdV3, ContainerdV2, RuntimeClass, InstallSh}
	if diff := cmp.Diff(want, names); diff != "" {
		t.Errorf("file names (-want +got):\n%s", diff)
	}
}

// TestRenderDeploymentDeterministic renders the same deployment many times: every file must be
// byte-identical.
func TestRenderDeploymentDeterministic(t *testing.T) {
	first, err := RenderDeployment(deployment)
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		again, err := RenderDeployment(deployment)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(first, again); diff != "" {
			t.Fatalf("two renders differ:\n%s", diff)
		}
	}
}

// TestContainerdSnippets parses both snippets as TOML and checks the handler keys containerd reads.
func TestContainerdSnippets(t *testing.T) {
	files, err := RenderDeployment(deployment)
	if err != nil {
		t.Fatal(err)
	}
	type runtime struct {
		RuntimeType                  string   `toml:"runtime_type"`
		RuntimePath                  string   `toml:"runtime_path"`
		PrivilegedWithoutHostDevices bool     `toml:"privileged_without_host_devices"`
		PodAnnotations               []string `toml:"pod_annotations"`
		Options                      struct {
			ConfigPath string `toml:"ConfigPath"`
		} `toml:"options"`
	}
	want := map[string]runtime{
		"allox": {"io.containerd.kata.v2", RuntimeRsShim, true, defaultPodAnnotations,
			struct {
				ConfigPath string `toml:"ConfigPath"`
			}{"/etc/kata-containers/allox/runtime-rs/configuration-qemu-runtime-rs.toml"}},
		"allox-go": {"io.containerd.kata.v2", GoShim, true, defaultPodAnnotations,
			struct {
				ConfigPath string `toml:"ConfigPath"`
			}{"/etc/kata-containers/allox/configuration-qemu.toml"}},
	}
	for name, plugin := range map[string]string{ContainerdV3: pluginV3, ContainerdV2: pluginV2} {
		var cfg struct {
			Plugins map[string]struct {
				Containerd struct {
					Runtimes map[string]runtime `toml:"runtimes"`
				} `toml:"containerd"`
			} `toml:"plugins"`
		}
		md, err := toml.Decode(string(file(t, files, name)), &cfg)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if u := md.Undecoded(); len(u) > 0 {
			t.Errorf("%s: unexpected keys %v", name, u)
		}
		if len(cfg.Plugins) != 1 {
			t.Errorf("%s: plugins %v; want only %s", name, cfg.Plugins, plugin)
		}
		if diff := cmp.Diff(want, cfg.Plugins[plugin].Containerd.Runtimes); diff != "" {
			t.Errorf("%s handlers (-want +got):\n%s", name, diff)
		}
	}
}

// defaultPodAnnotations are DefaultEnableAnnotations's full names, written out.
var defaultPodAnnotations = []string{"io.katacontainers.config.hypervisor.default_vcpus", "io.katacontainers.config.hypervisor.default_memory"}

func file(t *testing.T, files []File, name string) []byte {
	t.Helper()
	for _, f := range files {
		if f.Name == name {
			return f.Data
		}
	}
	t.Fatalf("no %s among the rendered files", name)
	return nil
}

func TestRenderDeploymentErrors(t *testing.T) {
	for _, tt := range []struct {
		name string
		mod  func(*Deployment)
		want string
	}{
		{"bad name", func(d *Deployment) { d.Name = "Allox_OS" }, `Name "Allox_OS"`},
		{"kernel elsewhere", func(d *Deployment) { d.Assets.Kernel = "/srv/bzImage" }, `Assets.Kernel "/srv/bzImage" is not in /opt/allox/allox`},
		{"relative config dir", func(d *Deployment) { d.ConfigDir = "etc/kata" }, `ConfigDir "etc/kata" is relative`},
		{"bad assets", func(d *Deployment) { d.Assets.RootfsType = "btrfs" }, `RootfsType "btrfs"`},
	} {
		d := deployment
		tt.mod(&d)
		if _, err := RenderDeployment(d); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: RenderDeployment = %v; want an error containing %q", tt.name, err, tt.want)
		}
	}
}

// installFixture is a build output directory with real files, install.sh and a manifest.json
// written the way mkimage writes it, and a directory standing in for Kata's shipped configurations.
type installFixture struct {
	out, defaults, dest, conf string
}

func newInstallFixture(t *testing.T) installFixture {
	t.Helper()
	root := t.TempDir()
	fx := installFixture{out: filepath.Join(root, "out"), defaults: filepath.Join(root, "kata-defaults"),
		dest: filepath.Join(root, "dest"), conf: "/etc/kata-containers/allox"}
	files, err := RenderDeployment(deployment)
	if err != nil {
		t.Fatal(err)
	}
	write := func(p string, data []byte, mode os.FileMode) {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, mode); err != nil {
			t.Fatal(err)
		}
	}
	type output struct {
		Path   string `json:"path"`
		Size   int    `json:"size"`
		SHA256 string `json:"sha256"`
	}
	var outputs []output
	add := func(rel string, data []byte, mode os.FileMode) {
		write(filepath.Join(fx.out, filepath.FromSlash(rel)), data, mode)
		sum := sha256.Sum256(data)
		outputs = append(outputs, output{rel, len(data), hex.EncodeToString(sum[:])})
	}
	add("bzImage", bytes.Repeat([]byte("kernel"), 1000), 0o644)
	add("rootfs.img", bytes.Repeat([]byte{0, 1, 2, 3}, 4096), 0o644)
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
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(manifest); err != nil {
		t.Fatal(err)
	}
	write(filepath.Join(fx.out, "manifest.json"), buf.Bytes(), 0o644)
	write(filepath.Join(fx.defaults, GoConfigFile), []byte("# Kata's Go runtime configuration\n"), 0o644)
	write(filepath.Join(fx.defaults, filepath.FromSlash(RuntimeRsConfig)), []byte("# Kata's runtime-rs configuration\n"), 0o644)
	return fx
}

// install runs the real install.sh with sh.
func (fx installFixture) install(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("sh", append([]string{filepath.Join(fx.out, "kata", InstallSh)}, args...)...)
	cmd.Env = append(os.Environ(), "DESTDIR="+fx.dest, "KATA_DEFAULTS="+fx.defaults)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// tree lists every file under dir with its contents.
func tree(t *testing.T, dir string) map[string]string {
	t.Helper()
	m := map[string]string{}
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			data, _ := os.ReadFile(p)
			rel, _ := filepath.Rel(dir, p)
			m[filepath.ToSlash(rel)] = string(data)
		}
		return nil
	})
	return m
}

func TestInstallScript(t *testing.T) {
	fx := newInstallFixture(t)
	out, err := fx.install(t, fx.conf)
	if err != nil {
		t.Fatalf("install.sh: %v\n%s", err, out)
	}
	got := tree(t, fx.dest)
	want := map[string]string{
		"opt/allox/allox/bzImage":                                                 "",
		"opt/allox/allox/rootfs.img":                                              "",
		"etc/kata-containers/allox/config.d/50-allox.toml":                        "",
		"etc/kata-containers/allox/runtime-rs/config.d/50-allox.toml":             "",
		"etc/kata-containers/allox/configuration-qemu.toml":                       "# Kata's Go runtime configuration\n",
		"etc/kata-containers/allox/runtime-rs/configuration-qemu-runtime-rs.toml": "# Kata's runtime-rs configuration\n",
	}
	for rel := range want {
		src := map[string]string{
			"opt/allox/allox/bzImage":                                     "bzImage",
			"opt/allox/allox/rootfs.img":                                  "rootfs.img",
			"etc/kata-containers/allox/config.d/50-allox.toml":            "kata/config.d/50-allox.toml",
			"etc/kata-containers/allox/runtime-rs/config.d/50-allox.toml": "kata/runtime-rs/config.d/50-allox.toml",
		}[rel]
		if src != "" {
			data, err := os.ReadFile(filepath.Join(fx.out, filepath.FromSlash(src)))
			if err != nil {
				t.Fatal(err)
			}
			want[rel] = string(data)
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("installed tree (-want +got):\n%s\ninstall.sh said:\n%s", diff, out)
	}
	// A configuration already in CONFIG_DIR is the operator's: a second install keeps it.
	own := filepath.Join(fx.dest, "etc/kata-containers/allox/configuration-qemu.toml")
	if err := os.WriteFile(own, []byte("# tuned\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := fx.install(t, fx.conf); err != nil {
		t.Fatalf("second install.sh: %v\n%s", err, out)
	}
	if data, _ := os.ReadFile(own); string(data) != "# tuned\n" {
		t.Errorf("install.sh replaced the operator's configuration: %q", data)
	}
}

func TestInstallScriptRefuses(t *testing.T) {
	for _, tt := range []struct {
		name  string
		spoil func(t *testing.T, fx installFixture)
		args  []string
		want  []string
	}{{
		name: "flipped byte",
		spoil: func(t *testing.T, fx installFixture) {
			p := filepath.Join(fx.out, "rootfs.img")
			data, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			data[len(data)/2] ^= 0x01
			if err := os.WriteFile(p, data, 0o644); err != nil {
				t.Fatal(err)
			}
		},
		want: []string{"rootfs.img: sha256", "does not match manifest.json's"},
	}, {
		name: "changed drop-in",
		spoil: func(t *testing.T, fx installFixture) {
			appendTo(t, filepath.Join(fx.out, "kata/runtime-rs/config.d/50-allox.toml"), "x = 1\n")
		},
		want: []string{"kata/runtime-rs/config.d/50-allox.toml: sha256"},
	}, {
		name:  "missing file",
		spoil: func(t *testing.T, fx installFixture) { remove(t, filepath.Join(fx.out, "bzImage")) },
		want:  []string{"bzImage: missing from"},
	}, {
		name:  "missing manifest",
		spoil: func(t *testing.T, fx installFixture) { remove(t, filepath.Join(fx.out, "manifest.json")) },
		want:  []string{"manifest.json is missing"},
	}, {
		name:  "no Kata configuration",
		spoil: func(t *testing.T, fx installFixture) { remove(t, filepath.Join(fx.defaults, GoConfigFile)) },
		want:  []string{"configuration-qemu.toml: in neither"},
	}, {
		name:  "relative config dir",
		spoil: func(*testing.T, installFixture) {},
		args:  []string{"etc/kata"},
		want:  []string{"CONFIG_DIR etc/kata is relative"},
	}, {
		name:  "no argument",
		spoil: func(*testing.T, installFixture) {},
		args:  []string{},
		want:  []string{"usage: sh install.sh CONFIG_DIR"},
	}} {
		t.Run(tt.name, func(t *testing.T) {
			fx := newInstallFixture(t)
			tt.spoil(t, fx)
			args := tt.args
			if args == nil {
				args = []string{fx.conf}
			}
			out, err := fx.install(t, args...)
			if err == nil {
				t.Fatalf("install.sh succeeded:\n%s", out)
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("install.sh output lacks %q:\n%s", w, out)
				}
			}
			if written := tree(t, fx.dest); len(written) > 0 {
				t.Errorf("install.sh refused but wrote %d files: %v", len(written), written)
			}
		})
	}
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
