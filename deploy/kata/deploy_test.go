package kata

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
	"github.com/google/go-cmp/cmp"
)

var deployment = Deployment{
	Name:    "allox",
	Release: "0123456789abcdef",
	Assets: Assets{
		Kernel:             "/opt/allox/allox/0123456789abcdef/bzImage",
		Image:              "/opt/allox/allox/0123456789abcdef/rootfs.img",
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
		{"kernel elsewhere", func(d *Deployment) { d.Assets.Kernel = "/srv/bzImage" }, `Assets.Kernel "/srv/bzImage" is not in /opt/allox/allox/0123456789abcdef`},
		{"kernel in another release", func(d *Deployment) { d.Assets.Kernel = "/opt/allox/allox/fedcba9876543210/bzImage" }, `set it to /opt/allox/allox/0123456789abcdef/bzImage`},
		{"no release", func(d *Deployment) { d.Release = "" }, `Release "": use 1 to 64`},
		{"release with a slash", func(d *Deployment) { d.Release = "a/b" }, `Release "a/b"`},
		{"config dir with a space", func(d *Deployment) { d.ConfigDir = "/etc/kata containers" }, `contains white space`},
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
