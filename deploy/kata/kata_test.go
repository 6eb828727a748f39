package kata

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
	"github.com/google/go-cmp/cmp"
)

const testVerity = "root_hash=3f1c2a9d0b6e4f5a8c7d2e1f0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e3f2a1b,salt=00ff10ee,data_blocks=65536,data_block_size=4096,hash_block_size=4096"

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

var cases = map[string]Assets{
	"image": {
		Kernel:             "/opt/allox/share/vmlinux-6.18",
		Image:              "/opt/allox/share/allox-agent.img",
		RootfsType:         "ext4",
		KernelParams:       []string{"cgroup_no_v1=all", "systemd.unified_cgroup_hierarchy=1", `allox.note="quoted\value"`},
		DefaultMemoryMiB:   2048,
		DisableImageNvdimm: true,
		EnableAnnotations:  DefaultEnableAnnotations,
	},
	"image-nvdimm-default-memory": {
		Kernel:     "/opt/allox/share/vmlinux-6.18",
		Image:      "/opt/allox/share/allox-agent.img",
		RootfsType: "erofs",
	},
	"image-verity": {
		Kernel:             "/opt/allox/share/vmlinux-6.18",
		Image:              "/opt/allox/share/allox-agent.img",
		RootfsType:         "ext4",
		DisableImageNvdimm: true,
		KernelVerityParams: testVerity,
	},
	"initrd": {
		Kernel:           "/opt/allox/share/vmlinux-6.18",
		Initrd:           "/opt/allox/share/allox-agent.initrd",
		InitrdBytes:      150*mib + 1,
		DefaultMemoryMiB: 1024,
	},
}

func TestRenderGolden(t *testing.T) {
	for name, a := range cases {
		t.Run(name, func(t *testing.T) {
			files, err := Render(a)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, f := range files {
				names = append(names, f.Name)
				golden := filepath.Join("testdata", name, filepath.FromSlash(f.Name))
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
			}
			if diff := cmp.Diff([]string{GoRuntimeDropIn, RuntimeRsDropIn}, names); diff != "" {
				t.Errorf("file names (-want +got):\n%s", diff)
			}
			again, _ := Render(a)
			if diff := cmp.Diff(files, again); diff != "" {
				t.Errorf("two renders differ:\n%s", diff)
			}
		})
	}
}

// qemu mirrors the [hypervisor.qemu] keys both Kata runtimes declare (Go: katautils.hypervisor;
// Rust: kata-types BootInfo, BlockDeviceInfo, MemoryInfo), with their TOML types.
type qemu struct {
	Kernel             string   `toml:"kernel"`
	Image              string   `toml:"image"`
	Initrd             string   `toml:"initrd"`
	RootfsType         string   `toml:"rootfs_type"`
	KernelParams       string   `toml:"kernel_params"`
	DefaultMemory      uint32   `toml:"default_memory"`
	DisableImageNvdimm bool     `toml:"disable_image_nvdimm"`
	VMRootfsDriver     string   `toml:"vm_rootfs_driver"` // runtime-rs only
	KernelVerityParams string   `toml:"kernel_verity_params"`
	BlockDeviceDriver  string   `toml:"block_device_driver"`
	EnableAnnotations  []string `toml:"enable_annotations"`
	MachineType        string   `toml:"machine_type"`
}

type config struct {
	Hypervisor map[string]qemu `toml:"hypervisor"`
}

// decode parses a drop-in on top of base, as Kata's Go runtime does (BurntSushi/toml decoding into
// the already-filled struct; only keys present in the drop-in change).
func decode(t *testing.T, base qemu, data []byte) (qemu, []string) {
	t.Helper()
	var c config
	md, err := toml.Decode(string(data), &c)
	if err != nil {
		t.Fatalf("parse:\n%s\n%v", data, err)
	}
	got := base
	var keys []string
	for _, k := range md.Keys() {
		if len(k) == 3 {
			keys = append(keys, k[2])
		}
	}
	if u := md.Undecoded(); len(u) > 0 {
		t.Errorf("keys outside [hypervisor.qemu]: %v", u)
	}
	dropIn := c.Hypervisor["qemu"]
	for _, k := range keys {
		switch k {
		case "kernel":
			got.Kernel = dropIn.Kernel
		case "image":
			got.Image = dropIn.Image
		case "initrd":
			got.Initrd = dropIn.Initrd
		case "rootfs_type":
			got.RootfsType = dropIn.RootfsType
		case "kernel_params":
			got.KernelParams = dropIn.KernelParams
		case "default_memory":
			got.DefaultMemory = dropIn.DefaultMemory
		case "disable_image_nvdimm":
			got.DisableImageNvdimm = dropIn.DisableImageNvdimm
		case "vm_rootfs_driver":
			got.VMRootfsDriver = dropIn.VMRootfsDriver
		case "kernel_verity_params":
			got.KernelVerityParams = dropIn.KernelVerityParams
		case "enable_annotations":
			got.EnableAnnotations = dropIn.EnableAnnotations
		case "block_device_driver":
			got.BlockDeviceDriver = dropIn.BlockDeviceDriver
		default:
			t.Errorf("unexpected key %q", k)
		}
	}
	return got, keys
}

// shipped is the part of Kata's shipped x86_64 configuration-qemu.toml that the drop-in overrides.
var shipped = qemu{
	Kernel:        "/opt/kata/share/kata-containers/vmlinux.container",
	Image:         "/opt/kata/share/kata-containers/kata-containers.img",
	RootfsType:    "ext4",
	KernelParams:  "cgroup_no_v1=all",
	DefaultMemory: 2048,
	// Kata's Makefile DEFENABLEANNOTATIONS, and a confidential template's verity parameters.
	EnableAnnotations:  []string{"enable_iommu", "kernel_params", "kernel_verity_params"},
	KernelVerityParams: "root_hash=aa,salt=bb,data_blocks=1,data_block_size=4096,hash_block_size=4096",
	VMRootfsDriver:     "virtio-pmem",
	MachineType:        "q35",
	// Kata's x86_64 DEFBLOCKSTORAGEDRIVER_QEMU; a platform's base configuration may say virtio-blk.
	BlockDeviceDriver: "virtio-blk",
}

func TestRenderParsesBack(t *testing.T) {
	for _, tt := range []struct {
		name           string
		wantGo, wantRs qemu
		goKeys, rsKeys []string
	}{
		{
			name: "image",
			wantGo: qemu{Kernel: "/opt/allox/share/vmlinux-6.18", Image: "/opt/allox/share/allox-agent.img", RootfsType: "ext4",
				KernelParams:  `cgroup_no_v1=all systemd.unified_cgroup_hierarchy=1 allox.note="quoted\value"`,
				DefaultMemory: 2048, DisableImageNvdimm: true, VMRootfsDriver: "virtio-pmem", MachineType: "q35", BlockDeviceDriver: "virtio-scsi",
				EnableAnnotations: []string{"^default_vcpus$", "^default_memory$"}},
			goKeys: []string{"kernel", "image", "initrd", "rootfs_type", "disable_image_nvdimm", "kernel_verity_params", "kernel_params", "default_memory", "enable_annotations", "block_device_driver"},
		},
		{
			name: "image-nvdimm-default-memory",
			wantGo: qemu{Kernel: "/opt/allox/share/vmlinux-6.18", Image: "/opt/allox/share/allox-agent.img", RootfsType: "erofs",
				DefaultMemory: 2048, VMRootfsDriver: "virtio-pmem", MachineType: "q35", BlockDeviceDriver: "virtio-scsi", EnableAnnotations: []string{}},
			goKeys: []string{"kernel", "image", "initrd", "rootfs_type", "disable_image_nvdimm", "kernel_verity_params", "kernel_params", "enable_annotations", "block_device_driver"},
		},
		{
			name: "image-verity",
			wantGo: qemu{Kernel: "/opt/allox/share/vmlinux-6.18", Image: "/opt/allox/share/allox-agent.img", RootfsType: "ext4",
				DefaultMemory: 2048, DisableImageNvdimm: true, VMRootfsDriver: "virtio-pmem", MachineType: "q35", BlockDeviceDriver: "virtio-scsi", KernelVerityParams: testVerity,
				EnableAnnotations: []string{}},
			goKeys: []string{"kernel", "image", "initrd", "rootfs_type", "disable_image_nvdimm", "kernel_verity_params", "kernel_params", "enable_annotations", "block_device_driver"},
		},
		{
			name: "initrd",
			wantGo: qemu{Kernel: "/opt/allox/share/vmlinux-6.18", Initrd: "/opt/allox/share/allox-agent.initrd", RootfsType: "ext4",
				DefaultMemory: 1024, VMRootfsDriver: "virtio-pmem", MachineType: "q35", BlockDeviceDriver: "virtio-scsi", EnableAnnotations: []string{}},
			goKeys: []string{"kernel", "image", "initrd", "kernel_verity_params", "kernel_params", "default_memory", "enable_annotations", "block_device_driver"},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			files, err := Render(cases[tt.name])
			if err != nil {
				t.Fatal(err)
			}
			gotGo, goKeys := decode(t, shipped, files[0].Data)
			if diff := cmp.Diff(tt.wantGo, gotGo); diff != "" {
				t.Errorf("Go runtime config after the drop-in (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.goKeys, goKeys); diff != "" {
				t.Errorf("Go runtime keys (-want +got):\n%s", diff)
			}
			if gotGo.Image != "" && gotGo.Initrd != "" {
				t.Error("the merged config has both image and initrd: Kata would refuse it")
			}

			gotRs, rsKeys := decode(t, shipped, files[1].Data)
			wantRs, wantRsKeys := tt.wantGo, tt.goKeys
			if wantRs.Image != "" {
				wantRs.VMRootfsDriver = map[bool]string{true: "virtio-blk-pci", false: "virtio-pmem"}[wantRs.DisableImageNvdimm]
				wantRsKeys = append(wantRsKeys, "vm_rootfs_driver")
			}
			if diff := cmp.Diff(wantRs, gotRs); diff != "" {
				t.Errorf("runtime-rs config after the drop-in (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(wantRsKeys, rsKeys); diff != "" {
				t.Errorf("runtime-rs keys (-want +got):\n%s", diff)
			}
			goBody, rsBody := body(files[0].Data), body(files[1].Data)
			if !strings.HasPrefix(rsBody, goBody) {
				t.Errorf("the runtime-rs keys do not start with the Go runtime's:\n%s\n---\n%s", goBody, rsBody)
			}
		})
	}
}

// body drops the header comment.
func body(data []byte) string {
	_, b, _ := bytes.Cut(data, []byte("[hypervisor.qemu]"))
	return string(b)
}

func TestRenderErrors(t *testing.T) {
	image := Assets{Kernel: "/k", Image: "/i.img", RootfsType: "ext4", DisableImageNvdimm: true}
	initrd := Assets{Kernel: "/k", Initrd: "/i.cpio", InitrdBytes: 200 * mib, DefaultMemoryMiB: 512}
	with := func(a Assets, f func(*Assets)) Assets { f(&a); return a }
	for _, tt := range []struct {
		name string
		a    Assets
		want []string
	}{
		{"both image and initrd", with(image, func(a *Assets) { a.Initrd = "/i.cpio" }), []string{"Image and Initrd are both set: Kata refuses"}},
		{"neither", Assets{Kernel: "/k"}, []string{"neither Image nor Initrd"}},
		{"no kernel", with(image, func(a *Assets) { a.Kernel = "" }), []string{"Kernel is empty"}},
		{"relative kernel", with(image, func(a *Assets) { a.Kernel = "vmlinux" }), []string{`Kernel "vmlinux" is relative`}},
		{"unclean image", with(image, func(a *Assets) { a.Image = "/opt//a/../i.img" }), []string{`write it as "/opt/i.img"`}},
		{"control char in path", with(image, func(a *Assets) { a.Image = "/i\n.img" }), []string{"control characters"}},
		{"no rootfs type", with(image, func(a *Assets) { a.RootfsType = "" }), []string{"RootfsType is empty", "ext4, xfs, erofs"}},
		{"bad rootfs type", with(image, func(a *Assets) { a.RootfsType = "btrfs" }), []string{`RootfsType "btrfs" is not one Kata mounts`}},
		{"initrd size with image", with(image, func(a *Assets) { a.InitrdBytes = 5 }), []string{"InitrdBytes is 5 but there is no Initrd"}},
		{"initrd too big", with(initrd, func(a *Assets) { a.DefaultMemoryMiB = 200 }), []string{"DefaultMemoryMiB 200 does not exceed the initrd's 200.0 MiB", "at least 201"}},
		{"initrd much too big", with(initrd, func(a *Assets) { a.InitrdBytes = 300*mib + 5; a.DefaultMemoryMiB = 256 }), []string{"at least 301"}},
		{"initrd memory unset", with(initrd, func(a *Assets) { a.DefaultMemoryMiB = 0 }), []string{"DefaultMemoryMiB is 0 with Initrd", "at least 201"}},
		{"initrd size unset", with(initrd, func(a *Assets) { a.InitrdBytes = 0 }), []string{"InitrdBytes is 0"}},
		{"rootfs type with initrd", with(initrd, func(a *Assets) { a.RootfsType = "ext4" }), []string{"applies to an Image only"}},
		{"nvdimm with initrd", with(initrd, func(a *Assets) { a.DisableImageNvdimm = true }), []string{"DisableImageNvdimm applies to an Image only"}},
		{"negative memory", with(image, func(a *Assets) { a.DefaultMemoryMiB = -1 }), []string{"DefaultMemoryMiB is -1"}},
		{"param with space", with(image, func(a *Assets) { a.KernelParams = []string{"ok=1", "a b"} }), []string{`KernelParams[1] "a b"`, "its own element"}},
		{"empty param", with(image, func(a *Assets) { a.KernelParams = []string{""} }), []string{"KernelParams[0]", "empty"}},
		{"root param", with(image, func(a *Assets) { a.KernelParams = []string{"root=/dev/vda2"} }), []string{"Kata sets root= itself"}},
		{"verity with initrd", with(initrd, func(a *Assets) { a.KernelVerityParams = testVerity }), []string{"KernelVerityParams applies to an Image only"}},
		{"verity malformed", with(image, func(a *Assets) { a.KernelVerityParams = "root_hash=zz,salt=00" }),
			[]string{"KernelVerityParams", `root_hash="zz"`, "hex digits only", "data_blocks is missing", "hash_block_size is missing"}},
		{"all errors at once", Assets{Kernel: "k", Image: "/i", Initrd: "/j", KernelParams: []string{"x y"}},
			[]string{"relative", "both set", "KernelParams[0]"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			files, err := Render(tt.a)
			if err == nil {
				t.Fatalf("Render succeeded:\n%s", files[0].Data)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
	for _, a := range []Assets{image, initrd, with(initrd, func(a *Assets) { a.DefaultMemoryMiB = 201 }), with(initrd, func(a *Assets) { a.InitrdBytes = 1 })} {
		if a.InitrdBytes == 1 {
			a.DefaultMemoryMiB = 1
		}
		if _, err := Render(a); err != nil {
			t.Errorf("Render(%+v): %v", a, err)
		}
	}
}
