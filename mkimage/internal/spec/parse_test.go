package spec

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/allox-os/allox/images"
	"github.com/allox-os/allox/internal/limit"
	"github.com/allox-os/allox/internal/manifest"
	"github.com/google/go-cmp/cmp"
)

const defaultSpec = "../../../images/allox.hcl"

// repoRoot is the absolute path of the checkout.
func repoRoot(t testing.TB) string {
	t.Helper()
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// wantDefault is images/allox.hcl as an Image, its fragments listed independently of Glob.
func wantDefault(t *testing.T) *Image {
	root := repoRoot(t)
	entries, err := os.ReadDir(filepath.Join(root, "kernel/fragments"))
	if err != nil {
		t.Fatal(err)
	}
	var fragments []string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".conf") {
			fragments = append(fragments, filepath.Join(root, "kernel/fragments", e.Name()))
		}
	}
	if len(fragments) == 0 || filepath.Base(fragments[0]) != "00-base.conf" {
		t.Fatalf("kernel/fragments holds %v; expected 00-base.conf first", fragments)
	}
	return &Image{
		Name:    "allox",
		Version: "0.1.0",
		File:    filepath.Join(root, "images/allox.hcl"),
		Kernel: Kernel{
			Source: KernelSource{
				DebianPackage: "linux-source-6.12",
				Version:       "6.12.117-1~deb12u1",
				SHA256:        "585a4a074597aefa2b1a68ada83a3184ba351c127544dea80618bbcceaa3961f",
			},
			Base:      "allnoconfig",
			Fragments: fragments,
			Patches:   filepath.Join(root, "kernel/patches/series"),
			Allowlist: filepath.Join(root, "kernel/allowlist"),
			Cmdline:   []string{"console=ttyS0", "panic=-1", "quiet"},
			KataParity: &KataParity{Symbols: filepath.Join(root, "kernel/kata/kata-4.1.0-x86_64.conf"),
				Allowlist: filepath.Join(root, "kernel/kata/parity-allowlist")},
		},
		Init: Init{
			Hostname: "allox",
			Store: manifest.Store{
				Serial: "allox-ws", Mountpoint: "/var/lib/allox/workspaces", Label: "allox-ws", FallbackSizeMiB: 512,
			},
			Network: &manifest.Network{Interface: "eth0", Address: "10.0.2.15/24", Gateway: "10.0.2.2"},
			FwCfg:   []manifest.FwCfg{{Name: "opt/allox/rpc-token", Path: "/run/allox/rpc-token", Mode: 0o600}},
		},
		Rootfs: Rootfs{
			Suite:      "bookworm",
			Packages:   []string{"btrfs-progs", "bubblewrap", "busybox", "ca-certificates"},
			Filesystem: "ext4",
		},
		Services: []Service{{
			Service: manifest.Service{
				Name: "workspace-daemon",
				Command: []string{
					"/usr/bin/allox-workspace-daemon",
					"--root", "/var/lib/allox/workspaces",
					"--listen", "127.0.0.1:8092",
					"--listen-host", "0.0.0.0:8093",
					"--token-file", "/run/allox/rpc-token",
				},
				Restart:     "always",
				Ready:       &manifest.Ready{TCP: "127.0.0.1:8092"},
				OOMScoreAdj: -997,
				MemoryLow:   64 << 20,
			},
			Build: "./services/workspace-daemon",
			Sandbox: &Sandbox{
				RunsMemoryReserve: 192 << 20,
				SessionQuota:      8 << 30,
				AgentQuota:        32 << 30,
				MaxSessionQuota:   64 << 30,
				StoreReserve:      128 << 20,
				SessionLimits:     limit.Set{PidsMax: 4096, MemoryMax: 4 << 30, MemorySwapMax: limit.Int64(0), CPUWeight: 100},
				RunLimits:         limit.Set{PidsMax: 1024, MemoryMax: 2 << 30, MemorySwapMax: limit.Int64(0), CPUWeight: 100},
				MaxLimits:         limit.Set{PidsMax: 16384, MemoryMax: 16 << 30, MemorySwapMax: limit.Int64(4 << 30), CPUWeight: 10000},
			},
		}},
		Kata: Kata{
			BootMode:     "image",
			RootfsType:   "ext4",
			KernelParams: []string{"cgroup_no_v1=all", "systemd.unified_cgroup_hierarchy=1"},
			Nvdimm:       true,
			// The default: pods may size their VM and change nothing else.
			EnableAnnotations: []string{"default_vcpus", "default_memory"}, BlockDeviceDriver: "virtio-scsi",
		},
		Output: Output{Dir: filepath.Join(root, "out")},
	}
}

func TestLoadDefault(t *testing.T) {
	img, diags := Load(defaultSpec)
	if len(diags) > 0 {
		t.Fatalf("Load(%s): %v", defaultSpec, diags)
	}
	if diff := cmp.Diff(wantDefault(t), img); diff != "" {
		t.Errorf("Load(%s) mismatch (-want +got):\n%s", defaultSpec, diff)
	}
}

// The embedded default, parsed against the images directory, is the same image as the file.
func TestParseEmbeddedDefault(t *testing.T) {
	img, diags := Parse(images.DefaultName, images.Default, filepath.Dir(defaultSpec))
	if len(diags) > 0 {
		t.Fatalf("Parse(embedded): %v", diags)
	}
	if diff := cmp.Diff(wantDefault(t), img); diff != "" {
		t.Errorf("Parse(embedded) mismatch (-want +got):\n%s", diff)
	}
}
