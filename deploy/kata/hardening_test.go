package kata

import (
	"path"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
	"github.com/google/go-cmp/cmp"
)

// otherAnnotations are names of Kata's other annotation families and near-misses of allowed
// names: none may ever reach the shim.
var otherAnnotations = []string{
	"io.katacontainers.config.agent.policy",
	"io.katacontainers.config.agent.kernel_modules",
	"io.katacontainers.config.runtime.disable_guest_seccomp",
	"io.katacontainers.config.runtime.experimental",
	"io.katacontainers.container.resource.swappiness",
	"io.katacontainers.pkg.oci.container_type",
	"io.katacontainers.config.hypervisor.default_vcpus_extra",
	"io.katacontainers.config.hypervisor.xdefault_memory",
	"io.katacontainers.config.hypervisorXdefault_memory",
}

// allAnnotations is every hypervisor annotation Kata knows, by full name, then otherAnnotations.
func allAnnotations() []string {
	var names []string
	for _, a := range hypervisorAnnotations {
		names = append(names, HypervisorAnnotationPrefix+a.name)
	}
	return append(names, otherAnnotations...)
}

var annotationLists = map[string][]string{
	"default": DefaultEnableAnnotations,
	"none":    nil,
	"tuning":  {"enable_hugepages", "memory_slots", "blk_logical_sector_size"},
}

// TestEnableAnnotationsInBothDropIns checks enable_annotations in the Go runtime's and
// runtime-rs's drop-ins the way both runtimes use it: a pod's hypervisor annotation is applied when
// any pattern matches its suffix, unanchored (Go regexp.MatchString, Rust RegexSet::is_match).
// Exactly the listed names may pass; no near-miss, and none of kernel_params and the others.
func TestEnableAnnotationsInBothDropIns(t *testing.T) {
	for name, list := range annotationLists {
		a := cases["image"]
		a.EnableAnnotations = list
		files, err := Render(a)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			var c config
			if _, err := toml.Decode(string(f.Data), &c); err != nil {
				t.Fatalf("%s %s: %v", name, f.Name, err)
			}
			patterns := c.Hypervisor["qemu"].EnableAnnotations
			if patterns == nil {
				t.Fatalf("%s %s: enable_annotations is not set, so the base configuration's list (Kata's allows kernel_params) would apply", name, f.Name)
			}
			var applied []string
			for _, full := range allAnnotations() {
				suffix, ok := strings.CutPrefix(full, HypervisorAnnotationPrefix)
				if ok && slices.ContainsFunc(patterns, func(p string) bool { return regexp.MustCompile(p).MatchString(suffix) }) {
					applied = append(applied, suffix)
				}
			}
			if diff := cmp.Diff(sorted(list), sorted(applied)); diff != "" {
				t.Errorf("%s %s: annotations Kata would apply with enable_annotations = %q (-want +got):\n%s", name, f.Name, patterns, diff)
			}
		}
	}
}

// TestPodAnnotationsInBothSnippets checks pod_annotations in the containerd 2.x and 1.7 snippets
// the way containerd uses it (internal/cri/util GetPassthroughAnnotations, 1.7 pkg/cri/server
// helpers.go: path.Match of each entry against each pod annotation): exactly the enabled hypervisor
// annotations pass, never the runtime or agent families the Go runtime applies unchecked.
func TestPodAnnotationsInBothSnippets(t *testing.T) {
	for name, list := range annotationLists {
		d := deployment
		d.Assets.EnableAnnotations = list
		files, err := RenderDeployment(d)
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		for _, n := range list {
			want = append(want, HypervisorAnnotationPrefix+n)
		}
		for _, snippet := range []string{ContainerdV3, ContainerdV2} {
			var cfg struct {
				Plugins map[string]struct {
					Containerd struct {
						Runtimes map[string]struct {
							PodAnnotations []string `toml:"pod_annotations"`
						} `toml:"runtimes"`
					} `toml:"containerd"`
				} `toml:"plugins"`
			}
			if _, err := toml.Decode(string(file(t, files, snippet)), &cfg); err != nil {
				t.Fatal(err)
			}
			for _, p := range cfg.Plugins {
				for handler, r := range p.Containerd.Runtimes {
					if r.PodAnnotations == nil {
						t.Fatalf("%s %s %s: pod_annotations unset", name, snippet, handler)
					}
					var passed []string
					for _, full := range allAnnotations() {
						if slices.ContainsFunc(r.PodAnnotations, func(p string) bool { ok, _ := path.Match(p, full); return ok }) {
							passed = append(passed, full)
						}
					}
					if diff := cmp.Diff(sorted(want), sorted(passed)); diff != "" {
						t.Errorf("%s %s %s: annotations containerd passes with %q (-want +got):\n%s", name, snippet, handler, r.PodAnnotations, diff)
					}
				}
			}
		}
	}
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// TestRenderRefusesDangerousAnnotations: one case per class that must never be enabled, each
// refused naming the field.
func TestRenderRefusesDangerousAnnotations(t *testing.T) {
	for _, n := range []string{"kernel_params", "kernel_verity_params", "kernel", "image", "initrd", "firmware",
		"jailer_path", "path", "entropy_source", "virtio_fs_daemon", "virtio_fs_extra_args", "machine_type",
		"cc_init_data", "kernel_.*", "io.katacontainers.config.agent.policy", "no_such_key"} {
		a := cases["image"]
		a.EnableAnnotations = []string{"default_memory", n}
		if _, err := Render(a); err == nil || !strings.Contains(err.Error(), "EnableAnnotations[1]: annotation not allowed: \""+n+"\"") {
			t.Errorf("EnableAnnotations %q: Render = %v; want it refused, naming EnableAnnotations[1]", a.EnableAnnotations, err)
		}
	}
}

// TestKernelVerityParamsPinned decodes each drop-in over a base configuration that carries its own
// verity parameters (as Kata's confidential templates do): with verity off the result is "".
func TestKernelVerityParamsPinned(t *testing.T) {
	if shipped.KernelVerityParams == "" {
		t.Fatal("BUG: the base configuration must carry kernel_verity_params for this test to mean anything")
	}
	for name, want := range map[string]string{"image": "", "image-nvdimm-default-memory": "", "initrd": "", "image-verity": testVerity} {
		files, err := Render(cases[name])
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if got, _ := decode(t, shipped, f.Data); got.KernelVerityParams != want {
				t.Errorf("%s %s: kernel_verity_params after the drop-in is %q; want %q", name, f.Name, got.KernelVerityParams, want)
			}
		}
	}
}

// goHypervisorKeys are the TOML keys of Kata 4.1.0's Go runtime [hypervisor.*] table
// (src/runtime/pkg/katautils/config.go, type hypervisor). A drop-in key outside it is fatal:
// updateFromDropIn's applyKey fails with `key "..." not found`.
var goHypervisorKeys = strings.Fields(`path jailer_path kernel initrd image rootfs_type firmware firmware_volume
	machine_accelerators cpu_features kernel_params kernel_verity_params machine_type
	tdx_quote_generation_service_socket_port block_device_driver entropy_source shared_fs
	virtio_fs_daemon virtio_fs_cache vhost_user_store_path guest_hook_path guest_memory_dump_path
	seccompsandbox block_device_aio remote_hypervisor_socket snp_id_block snp_id_auth
	snp_guest_policy measurement_algo valid_hypervisor_paths valid_jailer_paths
	valid_virtio_fs_daemon_paths virtio_fs_extra_args pflashes valid_vhost_user_store_paths
	valid_entropy_sources enable_annotations rx_rate_limiter_max_rate tx_rate_limiter_max_rate
	memory_offset default_maxmemory disk_rate_limiter_bw_max_rate disk_rate_limiter_bw_one_time_burst
	disk_rate_limiter_ops_max_rate disk_rate_limiter_ops_one_time_burst net_rate_limiter_bw_max_rate
	net_rate_limiter_bw_one_time_burst net_rate_limiter_ops_max_rate net_rate_limiter_ops_one_time_burst
	hypervisor_loglevel virtio_fs_cache_size virtio_fs_queue_size default_maxvcpus default_memory
	memory_slots default_bridges msize_9p remote_hypervisor_timeout default_vcpus block_device_cache_set
	block_device_cache_direct block_device_cache_noflush block_device_logical_sector_size
	block_device_physical_sector_size enable_vhost_user_store vhost_user_reconnect_timeout_sec
	disable_block_device_use enable_mem_prealloc reclaim_guest_freed_memory enable_hugepages
	enable_virtio_mem enable_iommu enable_iommu_platform enable_numa numa_mapping enable_debug
	disable_nesting_checks enable_iothreads indep_iothreads disable_image_nvdimm hot_plug_vfio
	cold_plug_vfio pcie_root_port pcie_switch_port disable_vhost_net guest_memory_dump_paging
	confidential_guest sev_snp_guest enable_guest_swap rootless disable_seccomp disable_selinux
	disable_guest_selinux use_legacy_serial extra_monitor_socket guest_extension_images`)

// rsHypervisorKeys are the runtime-rs [hypervisor.*] keys the drop-ins may write, each a field of
// Kata 4.1.0's kata-types Hypervisor or a struct it flattens (config/hypervisor/mod.rs: BootInfo
// kernel ... vm_rootfs_driver, BlockDeviceInfo disable_image_nvdimm, MemoryInfo default_memory,
// SecurityInfo enable_annotations; BlockDeviceInfo block_device_driver). runtime-rs ignores any other key silently, so a misspelt key
// would simply not apply: enable_annotations misspelt would leave Kata's, which allows
// kernel_params.
var rsHypervisorKeys = strings.Fields(`kernel image initrd rootfs_type kernel_params kernel_verity_params
	vm_rootfs_driver disable_image_nvdimm block_device_driver default_memory enable_annotations`)

// TestDropInKeysKnownToTheirRuntime: every key of each drop-in is one its runtime reads, because
// the Go runtime refuses to start on any other and runtime-rs drops it without a word.
func TestDropInKeysKnownToTheirRuntime(t *testing.T) {
	for name, a := range cases {
		files, err := Render(a)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			known := map[string][]string{GoRuntimeDropIn: goHypervisorKeys, RuntimeRsDropIn: rsHypervisorKeys}[f.Name]
			md, err := toml.Decode(string(f.Data), &struct{}{})
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range md.Keys() {
				if len(k) == 3 && (k[0] != "hypervisor" || k[1] != "qemu" || !slices.Contains(known, k[2])) {
					t.Errorf("%s %s: key %s is not one that runtime reads", name, f.Name, k)
				} else if len(k) > 3 || (len(k) < 3 && k[0] != "hypervisor") {
					t.Errorf("%s %s: key %s outside [hypervisor.qemu]", name, f.Name, k)
				}
			}
		}
	}
	if slices.Contains(goHypervisorKeys, "vm_rootfs_driver") {
		t.Error("BUG: vm_rootfs_driver is runtime-rs's only: in the Go runtime's drop-in it would be fatal")
	}
}

// TestBlockDeviceDriverPinned: whatever the base configuration says, both drop-ins leave Kata with
// the driver the guest kernel was built for (kata-check holds the kernel to the same value), and an
// unknown driver is refused naming the field.
func TestBlockDeviceDriverPinned(t *testing.T) {
	for _, driver := range []string{"", "virtio-scsi", "virtio-blk"} {
		a := cases["image"]
		a.BlockDeviceDriver = driver
		files, err := Render(a)
		if err != nil {
			t.Fatal(err)
		}
		want := driver
		if want == "" {
			want = DefaultBlockDeviceDriver
		}
		rsWant := want
		if want == "virtio-blk" {
			rsWant = "virtio-blk-pci" // runtime-rs's name for it (kata-types BlockDeviceInfo::validate)
		}
		for _, base := range []string{"virtio-scsi", "virtio-blk", "nvdimm"} {
			b := shipped
			b.BlockDeviceDriver = base
			for _, f := range files {
				w := want
				if f.Name == RuntimeRsDropIn {
					w = rsWant
				}
				if got, _ := decode(t, b, f.Data); got.BlockDeviceDriver != w {
					t.Errorf("BlockDeviceDriver %q over a base with %q: %s leaves %q; want %q", driver, base, f.Name, got.BlockDeviceDriver, w)
				}
			}
		}
	}
	a := cases["image"]
	a.BlockDeviceDriver = "virtio-mmio"
	if _, err := Render(a); err == nil || !strings.Contains(err.Error(), `BlockDeviceDriver: block_device_driver "virtio-mmio"`) {
		t.Errorf("Render with BlockDeviceDriver virtio-mmio = %v; want it refused naming the field", err)
	}
}
