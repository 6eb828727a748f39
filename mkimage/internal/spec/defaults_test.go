package spec

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/allox-os/allox/internal/manifest"
	"github.com/google/go-cmp/cmp"
)

// A spec that leaves everything optional out gets the documented defaults; relative paths resolve
// against the base directory; globs expand sorted, in glob order, without duplicates.
func TestParseDefaults(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"b.conf", "a.conf", "c.config", "linux.tar.xz", "base.config"} {
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "d.conf"), 0o755); err != nil { // directories never match
		t.Fatal(err)
	}
	src := `
name = "tiny"
kernel {
  source {
    tarball = "linux.tar.xz"
    sha256  = "585a4a074597aefa2b1a68ada83a3184ba351c127544dea80618bbcceaa3961f"
  }
  base      = "base.config"
  fragments = ["c.config", "*.conf", "a.conf"]
}
init {
  hostname = "tiny"
  workspace_store {
    serial            = "ws"
    mountpoint        = "/ws"
    label             = "ws"
    fallback_size_mib = 128
  }
}
rootfs {
  packages = ["zsh", "busybox", "zsh"]
}
service "sh" {
  command = ["/bin/sh"]
  env     = { HOME = "/root" }
}
`
	img, diags := Parse("tiny.hcl", []byte(src), dir)
	if len(diags) > 0 {
		t.Fatalf("Parse: %v", diags)
	}
	want := &Image{
		Name: "tiny",
		File: filepath.Join(dir, "tiny.hcl"),
		Kernel: Kernel{
			Source:    KernelSource{Tarball: filepath.Join(dir, "linux.tar.xz"), SHA256: "585a4a074597aefa2b1a68ada83a3184ba351c127544dea80618bbcceaa3961f"},
			Base:      filepath.Join(dir, "base.config"),
			Fragments: []string{filepath.Join(dir, "c.config"), filepath.Join(dir, "a.conf"), filepath.Join(dir, "b.conf")},
		},
		Init: Init{
			Hostname: "tiny",
			Store:    manifest.Store{Serial: "ws", Mountpoint: "/ws", Label: "ws", FallbackSizeMiB: 128},
		},
		Rootfs: Rootfs{Suite: "bookworm", Packages: []string{"busybox", "zsh"}, Filesystem: "ext4"},
		Services: []Service{{Service: manifest.Service{
			Name: "sh", Command: []string{"/bin/sh"}, Env: map[string]string{"HOME": "/root"}, Restart: "on-failure",
		}}},
		Kata:   Kata{BootMode: "image", RootfsType: "ext4", EnableAnnotations: []string{"default_vcpus", "default_memory"}, BlockDeviceDriver: "virtio-scsi"},
		Output: Output{Dir: filepath.Join(dir, "out")},
	}
	if diff := cmp.Diff(want, img); diff != "" {
		t.Errorf("Parse mismatch (-want +got):\n%s", diff)
	}
}

func TestManifest(t *testing.T) {
	img, diags := Load(defaultSpec)
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	m := img.Manifest()
	if err := m.Validate(); err != nil {
		t.Fatalf("Manifest().Validate: %v", err)
	}
	want := &manifest.Manifest{
		Version:  manifest.Version,
		Image:    manifest.Image{Name: "allox", Version: "0.1.0"},
		Hostname: "allox",
		Store:    img.Init.Store,
		Network:  &manifest.Network{Interface: "eth0", Address: "10.0.2.15/24", Gateway: "10.0.2.2"},
		FwCfg:    []manifest.FwCfg{{Name: "opt/allox/rpc-token", Path: "/run/allox/rpc-token", Mode: 0o600}},
		Services: []manifest.Service{img.Services[0].Service},
	}
	// The sandbox block is rendered into the daemon's command line, after the hand-written flags.
	want.Services[0].Command = append(slices.Clone(img.Services[0].Command),
		"--session-limits=pids_max=4096,memory_max=4294967296,memory_swap_max=0,cpu_weight=100",
		"--run-limits=pids_max=1024,memory_max=2147483648,memory_swap_max=0,cpu_weight=100",
		"--max-limits=pids_max=16384,memory_max=17179869184,memory_swap_max=4294967296,cpu_weight=10000",
		"--runs-memory-reserve=201326592",
		"--session-quota=8589934592", "--agent-quota=34359738368", "--max-session-quota=68719476736", "--store-reserve=134217728")
	if diff := cmp.Diff(want, m); diff != "" {
		t.Errorf("Manifest mismatch (-want +got):\n%s", diff)
	}
	// The manifest shares no memory with the image.
	m.Services[0].Command[0] = "/changed"
	m.Services[0].Ready.TCP = "changed:1"
	m.Network.Gateway = "changed"
	m.FwCfg[0].Path = "/changed"
	if diff := cmp.Diff(wantDefault(t), img); diff != "" {
		t.Errorf("changing the manifest changed the image (-want +got):\n%s", diff)
	}
}

// loadAppliances loads images/allox.hcl and a test appliance spec from qemu-tests/testdata/.
func loadAppliances(t *testing.T, testSpec string) (def, img *Image) {
	t.Helper()
	def, diags := Load("../../../images/allox.hcl")
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	img, diags = Load("../../../qemu-tests/testdata/" + testSpec)
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	return def, img
}

// checkPluginAppliance checks that img's daemon has exactly plugins and a command ending in flags,
// then strips both, with the spec file and output directory, so that the caller's final comparison
// with def sees only what must stay as in images/allox.hcl.
func checkPluginAppliance(t *testing.T, def, img *Image, name string, plugins, flags []string) {
	t.Helper()
	if diff := cmp.Diff(plugins, img.Services[0].Plugins); diff != "" {
		t.Errorf("%s daemon plugins (-want +got):\n%s", name, diff)
	}
	if got := img.Services[0].Command; len(got) < len(flags) || !slices.Equal(got[len(got)-len(flags):], flags) {
		t.Errorf("%s daemon command %q must end with %q", name, got, flags)
	} else {
		img.Services[0].Command = got[:len(got)-len(flags)]
	}
	img.Services[0].Plugins = def.Services[0].Plugins
	img.File, img.Output = def.File, def.Output
}

// The appliance of the guest's process-tree test is the default one plus the plugin: its kernel
// inputs are identical, so the second `make image` build takes the kernel from the cache.
func TestProcessTreeSpec(t *testing.T) {
	def, pt := loadAppliances(t, "process-tree.hcl")
	if diff := cmp.Diff(def.Kernel, pt.Kernel); diff != "" {
		t.Errorf("kernel differs from images/allox.hcl (-default +process-tree):\n%s", diff)
	}
	if got := def.Services[0].Plugins; len(got) != 0 {
		t.Errorf("images/allox.hcl daemon plugins = %q, want none", got)
	}
	if got := PluginTag("process-tree"); got != "allox_process_tree" {
		t.Errorf("PluginTag(process-tree) = %q", got)
	}
	// The test image is a hand copy: everything but the daemon's plugins and tracker flags, the spec
	// file and the output directory must stay as in images/allox.hcl, or the guest test would be
	// testing a different appliance.
	checkPluginAppliance(t, def, pt, "process-tree.hcl", []string{"process-tree"},
		[]string{"--process-tracker", "--process-tree-provider", "ebpf"})
	if diff := cmp.Diff(def, pt); diff != "" {
		t.Errorf("process-tree.hcl drifted from images/allox.hcl beyond the provider (-default +process-tree):\n%s", diff)
	}
}

// The appliance of the guest's system-effects test is the default one plus the observer plugin,
// enabled with its scope file and managed execution, and session share beside it (the test checks
// a share write is never the writer's change): nothing else may differ.
func TestSystemEffectsSpec(t *testing.T) {
	def, se := loadAppliances(t, "system-effects.hcl")
	checkPluginAppliance(t, def, se, "system-effects.hcl", []string{PluginSystemEffects, PluginSessionShare},
		[]string{"--observer", "--observer-scope", ObserverScopeFile})
	if sb := se.Services[0].Sandbox; sb == nil || !sb.ManagedExecution || !sb.ShareTools {
		t.Errorf("system-effects.hcl must allow managed execution and share tools in its sandbox block: %+v", sb)
	} else {
		sb.ManagedExecution, sb.ShareTools = false, false
	}
	if diff := cmp.Diff(def, se); diff != "" {
		t.Errorf("system-effects.hcl drifted from images/allox.hcl beyond the observer (-default +system-effects):\n%s", diff)
	}
}

// The appliance of the Probe's dialog test is the default one plus the dialog plugin, enabled by
// sandbox { dialog = true } (rendered --dialog): nothing else may differ.
func TestDialogSpec(t *testing.T) {
	def, dl := loadAppliances(t, "dialog.hcl")
	checkPluginAppliance(t, def, dl, "dialog.hcl", []string{PluginDialog}, nil)
	if cmd := dl.Manifest().Services[0].Command; !slices.Contains(cmd, "--dialog") || slices.Contains(def.Manifest().Services[0].Command, "--dialog") {
		t.Errorf("the daemon's command %q must hold --dialog (and the default's must not)", cmd)
	}
	if sb := dl.Services[0].Sandbox; sb == nil || !sb.Dialog {
		t.Fatal("dialog.hcl does not set sandbox { dialog = true }")
	} else {
		sb.Dialog = false
	}
	if diff := cmp.Diff(def, dl); diff != "" {
		t.Errorf("dialog.hcl drifted from images/allox.hcl beyond the plugin (-default +dialog):\n%s", diff)
	}
}

// The appliance of the guest's session client test is the default one with python3-minimal in
// the userland (for the python shims): nothing else may differ.
func TestPythonSpec(t *testing.T) {
	def, py := loadAppliances(t, "python.hcl")
	checkPluginAppliance(t, def, py, "python.hcl", nil, nil)
	if got := py.Rootfs.Packages; len(got) == 0 || got[len(got)-1] != "python3-minimal" {
		t.Errorf("python.hcl rootfs packages %q must end with python3-minimal", got)
	} else {
		py.Rootfs.Packages = got[:len(got)-1]
	}
	if diff := cmp.Diff(def, py); diff != "" {
		t.Errorf("python.hcl drifted from images/allox.hcl beyond python3-minimal (-default +python):\n%s", diff)
	}
}

// The appliance of the guest's session-network tests is the default one plus the plugin in proxy
// mode, python3-minimal and openssh-client, and a policy opening the tests' forwarded address: nothing else may
// differ. Its session_network block renders the daemon's flags and the installed policy.
func TestSessionNetworkSpec(t *testing.T) {
	def, sn := loadAppliances(t, "session-network.hcl")
	checkPluginAppliance(t, def, sn, "session-network.hcl", []string{PluginSessionNetwork}, nil)
	if got := PluginTag(PluginSessionNetwork); got != "allox_session_network" {
		t.Errorf("PluginTag(session-network) = %q", got)
	}
	cmd := sn.Manifest().Services[0].Command
	if want := []string{"--session-network=proxy", "--session-network-modes=disabled,isolated,proxy"}; !slices.Equal(cmd[len(cmd)-2:], want) {
		t.Errorf("the daemon's command %q must end with %q", cmd, want)
	}
	files := PluginFilesOf(sn.Services[0], PluginSessionNetwork)
	policy, ok := files[SessionNetworkPolicyFile]
	if !ok || len(files) != 1 || !strings.HasSuffix(policy, "\nallow cidr 10.0.2.100/32 port 8080,8443,2222\ndefault allow\n") {
		t.Errorf("installed policy files %q: want %s with the rule before the default", files, SessionNetworkPolicyFile)
	}
	if def := PluginFiles[PluginSessionNetwork][SessionNetworkPolicyFile]; strings.Contains(def, "10.0.2.100/32") || !strings.HasSuffix(def, "\ndefault allow\n") {
		t.Errorf("the plugin's default policy opens something or lacks its default:\n%s", def)
	}
	extra := []string{"openssh-client", "python3-minimal"}
	if got := slices.DeleteFunc(slices.Clone(sn.Rootfs.Packages), func(p string) bool { return !slices.Contains(extra, p) }); !slices.Equal(got, extra) {
		t.Errorf("session-network.hcl rootfs packages %q must hold %q", sn.Rootfs.Packages, extra)
	}
	sn.Rootfs.Packages = slices.DeleteFunc(sn.Rootfs.Packages, func(p string) bool { return slices.Contains(extra, p) })
	if sb := sn.Services[0].Sandbox; sb == nil || sb.SessionNetwork == nil {
		t.Fatal("session-network.hcl has no session_network block")
	} else {
		sb.SessionNetwork = nil
	}
	if diff := cmp.Diff(def, sn); diff != "" {
		t.Errorf("session-network.hcl drifted from images/allox.hcl beyond the plugin (-default +session-network):\n%s", diff)
	}
}

// The appliance of the guest's session-share test is the default one plus the plugin with its
// tools on (rendered --share-tools) and python3-minimal: nothing else may differ.
func TestSessionShareSpec(t *testing.T) {
	def, ss := loadAppliances(t, "session-share.hcl")
	checkPluginAppliance(t, def, ss, "session-share.hcl", []string{PluginSessionShare}, nil)
	if cmd := ss.Manifest().Services[0].Command; !slices.Contains(cmd, "--share-tools") || slices.Contains(def.Manifest().Services[0].Command, "--share-tools") {
		t.Errorf("the daemon's command %q must hold --share-tools (and the default's must not)", cmd)
	}
	if got := PluginTag(PluginSessionShare); got != "allox_session_share" {
		t.Errorf("PluginTag(session-share) = %q", got)
	}
	if got := ss.Rootfs.Packages; len(got) == 0 || got[len(got)-1] != "python3-minimal" {
		t.Errorf("session-share.hcl rootfs packages %q must end with python3-minimal", got)
	} else {
		ss.Rootfs.Packages = got[:len(got)-1]
	}
	if sb := ss.Services[0].Sandbox; sb == nil || !sb.ShareTools {
		t.Fatal("session-share.hcl does not set sandbox { share_tools = true }")
	} else {
		sb.ShareTools = false
	}
	if diff := cmp.Diff(def, ss); diff != "" {
		t.Errorf("session-share.hcl drifted from images/allox.hcl beyond the plugin (-default +session-share):\n%s", diff)
	}
}

// A session_network block with its own policy path installs the policy there, and renders the flag.
func TestSessionNetworkPolicyPath(t *testing.T) {
	n := &SessionNetwork{Default: "isolated", Policy: "/etc/net.policy", Rules: "deny host *.example.com"}
	svc := Service{Sandbox: &Sandbox{SessionNetwork: n}}
	files := PluginFilesOf(svc, PluginSessionNetwork)
	if p := files["/etc/net.policy"]; len(files) != 1 || !strings.HasSuffix(p, "\ndeny host *.example.com\ndefault allow\n") {
		t.Errorf("policy files %q", files)
	}
	if diff := cmp.Diff([]string{"--session-network=isolated", "--session-network-policy=/etc/net.policy"}, svc.Sandbox.Flags()); diff != "" {
		t.Errorf("flags (-want +got):\n%s", diff)
	}
	if got := PluginFilesOf(Service{}, PluginSystemEffects); len(got) != 1 {
		t.Errorf("another plugin's files changed: %q", got)
	}
}
