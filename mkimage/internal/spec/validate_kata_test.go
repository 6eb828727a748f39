package spec

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestEnableAnnotationsRefused is one case per class of hypervisor annotation a pod must never be
// given: each is refused, naming the element and why.
func TestEnableAnnotationsRefused(t *testing.T) {
	for _, tt := range []struct {
		name, list string
		want       []string
	}{
		{"kernel command line", `["default_vcpus", "kernel_params"]`,
			[]string{`37:42: Annotation not allowed: "kernel_params" can never be enabled: it rewrites the guest kernel command line (root=, dm-verity), walking around the image's integrity. Remove it from enable_annotations.`}},
		{"dm-verity parameters", `["kernel_verity_params"]`,
			[]string{`37:25: Annotation not allowed: "kernel_verity_params" can never be enabled: it rewrites the guest kernel command line (root=, dm-verity), walking around the image's integrity. Remove it from enable_annotations.`}},
		{"boot assets", `["kernel", "image", "initrd", "firmware", "firmware_volume", "image_hash"]`, []string{
			`37:25: Annotation not allowed: "kernel" can never be enabled: it swaps a boot asset (kernel, image, initrd, firmware) or its hash for one the pod names. Remove it from enable_annotations.`,
			`37:35: Annotation not allowed: "image" can never be enabled: it swaps a boot asset (kernel, image, initrd, firmware) or its hash for one the pod names. Remove it from enable_annotations.`,
			`37:44: Annotation not allowed: "initrd" can never be enabled: it swaps a boot asset (kernel, image, initrd, firmware) or its hash for one the pod names. Remove it from enable_annotations.`,
			`37:54: Annotation not allowed: "firmware" can never be enabled: it swaps a boot asset (kernel, image, initrd, firmware) or its hash for one the pod names. Remove it from enable_annotations.`,
			`37:66: Annotation not allowed: "firmware_volume" can never be enabled: it swaps a boot asset (kernel, image, initrd, firmware) or its hash for one the pod names. Remove it from enable_annotations.`,
			`37:85: Annotation not allowed: "image_hash" can never be enabled: it swaps a boot asset (kernel, image, initrd, firmware) or its hash for one the pod names. Remove it from enable_annotations.`,
		}},
		{"host paths", `["path", "jailer_path", "virtio_fs_daemon", "entropy_source", "vhost_user_store_path", "guest_hook_path"]`, []string{
			`37:25: Annotation not allowed: "path" can never be enabled: its value is a host path: the pod would choose which host file the runtime opens or executes. Remove it from enable_annotations.`,
			`37:33: Annotation not allowed: "jailer_path" can never be enabled: its value is a host path: the pod would choose which host file the runtime opens or executes. Remove it from enable_annotations.`,
			`37:48: Annotation not allowed: "virtio_fs_daemon" can never be enabled: its value is a host path: the pod would choose which host file the runtime opens or executes. Remove it from enable_annotations.`,
			`37:68: Annotation not allowed: "entropy_source" can never be enabled: its value is a host path: the pod would choose which host file the runtime opens or executes. Remove it from enable_annotations.`,
			`37:86: Annotation not allowed: "vhost_user_store_path" can never be enabled: its value is a host path: the pod would choose which host file the runtime opens or executes. Remove it from enable_annotations.`,
			`37:111: Annotation not allowed: "guest_hook_path" can never be enabled: its value is a host path: the pod would choose which host file the runtime opens or executes. Remove it from enable_annotations.`,
		}},
		{"host-side arguments", `["virtio_fs_extra_args"]`,
			[]string{`37:25: Annotation not allowed: "virtio_fs_extra_args" can never be enabled: it changes how the host runs the VM (hypervisor arguments, host devices and NUMA nodes, rootless mode). Remove it from enable_annotations.`}},
		{"machine and root device", `["machine_type", "disable_image_nvdimm", "block_device_driver"]`, []string{
			`37:25: Annotation not allowed: "machine_type" can never be enabled: it changes the machine or the root device the image and the drop-ins are built for. Remove it from enable_annotations.`,
			`37:41: Annotation not allowed: "disable_image_nvdimm" can never be enabled: it changes the machine or the root device the image and the drop-ins are built for. Remove it from enable_annotations.`,
			`37:65: Annotation not allowed: "block_device_driver" can never be enabled: it changes the machine or the root device the image and the drop-ins are built for. Remove it from enable_annotations.`,
		}},
		{"confidential initdata", `["cc_init_data"]`,
			[]string{`37:25: Annotation not allowed: "cc_init_data" can never be enabled: it replaces data the guest trusts (confidential initdata: policy and attestation settings). Remove it from enable_annotations.`}},
		{"a pattern", `[".*"]`,
			[]string{`37:25: Annotation not allowed: ".*" is a pattern; list exact names (Kata treats each as a regular expression, so the drop-ins anchor it). Remove it from enable_annotations.`}},
		{"the agent family", `["io.katacontainers.config.agent.policy"]`,
			[]string{`37:25: Annotation not allowed: "io.katacontainers.config.agent.policy" is not a hypervisor annotation; Kata's Go runtime applies the runtime, agent and container families without checking enable_annotations, so none of them is ever passed to pods. Remove it from enable_annotations.`}},
		{"the full name", `["io.katacontainers.config.hypervisor.default_memory"]`,
			[]string{`37:25: Annotation not allowed: "io.katacontainers.config.hypervisor.default_memory": give the name without "io.katacontainers.config.hypervisor.", i.e. "default_memory". Remove it from enable_annotations.`}},
		{"a typo", `["default_vcpu"]`, []string{`37:25: Annotation not allowed: "default_vcpu" is not one of Kata 4.1.0's hypervisor annotations; those a pod may be given: ` +
			`blk_logical_sector_size, blk_physical_sector_size, block_device_aio, block_device_cache_direct, block_device_cache_noflush, block_device_cache_set, block_device_num_queues, block_device_queue_size, default_gpu_model, default_gpus, default_max_vcpus, default_memory, default_vcpus, disable_block_device_use, enable_guest_swap, enable_hugepages, enable_iommu, enable_iommu_platform, enable_iothreads, enable_mem_prealloc, enable_virtio_mem, hugepage_type, indep_iothreads, memory_offset, memory_slots, msize_9p, network_queues, pcie_root_port, pcie_switch_port, reclaim_guest_freed_memory, rx_rate_limiter_max_rate, tx_rate_limiter_max_rate, vhost_user_reconnect_timeout_sec, virtio_fs_cache, virtio_fs_cache_size. ` +
			`Remove it from enable_annotations. Did you mean "default_vcpus"?`}},
		{"twice", `["default_memory", "default_memory"]`,
			[]string{`37:43: Annotation listed twice: "default_memory" is already element 0; remove this one.`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			src := strings.Replace(validSpec, `boot_mode = "image"`, `boot_mode = "image"`+"\n  enable_annotations = "+tt.list, 1)
			_, diags := Parse("test.hcl", []byte(src), "../../../images")
			if diff := cmp.Diff(tt.want, render(t, diags)); diff != "" {
				t.Errorf("diagnostics (-want +got):\n%s", diff)
			}
		})
	}
}

// TestEnableAnnotationsAccepted: the default, an explicit empty list and a platform's choice of
// sizing and tuning knobs are valid.
func TestEnableAnnotationsAccepted(t *testing.T) {
	for list, want := range map[string][]string{
		"":                                       {"default_vcpus", "default_memory"},
		`[]`:                                     {},
		`["default_memory", "enable_hugepages"]`: {"default_memory", "enable_hugepages"},
	} {
		src := validSpec
		if list != "" {
			src = strings.Replace(src, `boot_mode = "image"`, `boot_mode = "image"`+"\n  enable_annotations = "+list, 1)
		}
		img, diags := Parse("test.hcl", []byte(src), "../../../images")
		if len(diags) > 0 {
			t.Fatalf("%s: %v", list, render(t, diags))
		}
		if diff := cmp.Diff(want, img.Kata.EnableAnnotations); diff != "" {
			t.Errorf("%s: EnableAnnotations (-want +got):\n%s", list, diff)
		}
	}
}

// TestBlockDeviceDriver: the default is Kata's virtio-scsi, virtio-blk is accepted, anything else
// is refused naming kata.block_device_driver and the values it may take.
func TestBlockDeviceDriver(t *testing.T) {
	for value, want := range map[string]string{"": "virtio-scsi", `"virtio-scsi"`: "virtio-scsi", `"virtio-blk"`: "virtio-blk"} {
		src := validSpec
		if value != "" {
			src = strings.Replace(src, `boot_mode = "image"`, `boot_mode = "image"`+"\n  block_device_driver = "+value, 1)
		}
		img, diags := Parse("test.hcl", []byte(src), "../../../images")
		if len(diags) > 0 {
			t.Fatalf("%s: %v", value, render(t, diags))
		}
		if img.Kata.BlockDeviceDriver != want {
			t.Errorf("block_device_driver = %s: got %q; want %q", value, img.Kata.BlockDeviceDriver, want)
		}
	}
	src := strings.Replace(validSpec, `boot_mode = "image"`, `boot_mode = "image"`+"\n  block_device_driver = \"virtio-blck\"", 1)
	_, diags := Parse("test.hcl", []byte(src), "../../../images")
	got := strings.Join(render(t, diags), "\n")
	for _, w := range []string{"kata.block_device_driver", `"virtio-scsi" or "virtio-blk"`, `Did you mean "virtio-blk"?`} {
		if !strings.Contains(got, w) {
			t.Errorf("diagnostics lack %q:\n%s", w, got)
		}
	}
}
