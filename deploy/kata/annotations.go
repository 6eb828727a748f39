package kata

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// KataVersion is the Kata Containers release whose runtimes this package models: the hypervisor
// annotations below, the drop-in merging rules and the kernel command line (KernelParams).
const KataVersion = "4.1.0"

// HypervisorAnnotationPrefix is the prefix of the pod annotations that change [hypervisor.*]
// settings. Both runtimes match enable_annotations against the rest of the name (Go:
// pkg/oci/utils.go checkAnnotationNameIsValid; runtime-rs: SecurityInfo::is_annotation_enabled).
const HypervisorAnnotationPrefix = "io.katacontainers.config.hypervisor."

// DefaultEnableAnnotations is what a pod may change when the spec says nothing: the size of its
// own VM. Both runtimes bound each (default_vcpus at most the host's CPUs, default_memory at least
// the hypervisor's minimum), the VM runs in the pod's sandbox and the setting neither names a host
// file nor touches the kernel command line or the boot assets. Kata's runtime-rs ships the same two
// among its defaults (with enable_iommu, kernel_params and kernel_verity_params, refused here).
var DefaultEnableAnnotations = []string{"default_vcpus", "default_memory"}

// Why an annotation is refused. Every class lets a pod walk around what the image promises or
// reach the host; none is a knob a platform hands to workloads.
const (
	refuseCmdline = "it rewrites the guest kernel command line (root=, dm-verity), walking around the image's integrity"
	refuseAsset   = "it swaps a boot asset (kernel, image, initrd, firmware) or its hash for one the pod names"
	refusePath    = "its value is a host path: the pod would choose which host file the runtime opens or executes"
	refuseHost    = "it changes how the host runs the VM (hypervisor arguments, host devices and NUMA nodes, rootless mode)"
	refuseMachine = "it changes the machine or the root device the image and the drop-ins are built for"
	refuseGuest   = "it replaces data the guest trusts (confidential initdata: policy and attestation settings)"
)

// hypervisorAnnotations are Kata 4.1.0's hypervisor annotations, the suffix after
// HypervisorAnnotationPrefix, from the Go runtime (virtcontainers/pkg/annotations/annotations.go,
// applied in pkg/oci/utils.go) and runtime-rs (libs/kata-types/src/annotations/mod.rs). refuse is
// why one may never be enabled; "" means a platform may enable it.
var hypervisorAnnotations = []struct{ name, refuse string }{
	{"kernel_params", refuseCmdline},
	{"kernel_verity_params", refuseCmdline},
	{"kernel", refuseAsset},
	{"image", refuseAsset},
	{"initrd", refuseAsset},
	{"firmware", refuseAsset},
	{"firmware_volume", refuseAsset},
	{"kernel_hash", refuseAsset},
	{"image_hash", refuseAsset},
	{"initrd_hash", refuseAsset},
	{"firmware_hash", refuseAsset},
	{"firmware_volume_hash", refuseAsset},
	{"hypervisor_hash", refuseAsset},
	{"jailer_hash", refuseAsset},
	{"path_hash", refuseAsset},
	{"asset_hash_type", refuseAsset},
	{"path", refusePath},
	{"jailer_path", refusePath},
	{"virtio_fs_daemon", refusePath},
	{"vhost_user_store_path", refusePath},
	{"entropy_source", refusePath},
	{"guest_hook_path", refusePath},
	{"prefetch_files.list", refusePath},
	{"virtio_fs_extra_args", refuseHost},
	{"enable_vhost_user_store", refuseHost},
	{"disable_vhost_net", refuseHost},
	{"rootless", refuseHost},
	{"hot_plug_vfio", refuseHost},
	{"cold_plug_vfio", refuseHost},
	{"numa_mapping", refuseHost},
	{"machine_type", refuseMachine},
	{"machine_accelerators", refuseMachine},
	{"cpu_features", refuseMachine},
	{"disable_image_nvdimm", refuseMachine},
	{"block_device_driver", refuseMachine},
	{"shared_fs", refuseMachine},
	{"use_legacy_serial", refuseMachine},
	{"cc_init_data", refuseGuest},
	{"default_vcpus", ""},
	{"default_max_vcpus", ""},
	{"default_memory", ""},
	{"memory_slots", ""},
	{"memory_offset", ""},
	{"enable_virtio_mem", ""},
	{"enable_mem_prealloc", ""},
	{"reclaim_guest_freed_memory", ""},
	{"enable_hugepages", ""},
	{"hugepage_type", ""},
	{"enable_guest_swap", ""},
	{"enable_iommu", ""},
	{"enable_iommu_platform", ""},
	{"msize_9p", ""},
	{"virtio_fs_cache", ""},
	{"virtio_fs_cache_size", ""},
	{"disable_block_device_use", ""},
	{"enable_iothreads", ""},
	{"indep_iothreads", ""},
	{"block_device_aio", ""},
	{"block_device_cache_set", ""},
	{"block_device_cache_direct", ""},
	{"block_device_cache_noflush", ""},
	{"blk_logical_sector_size", ""},
	{"blk_physical_sector_size", ""},
	{"block_device_num_queues", ""},
	{"block_device_queue_size", ""},
	{"network_queues", ""},
	{"rx_rate_limiter_max_rate", ""},
	{"tx_rate_limiter_max_rate", ""},
	{"vhost_user_reconnect_timeout_sec", ""},
	{"pcie_root_port", ""},
	{"pcie_switch_port", ""},
	{"default_gpus", ""},
	{"default_gpu_model", ""},
}

// ErrAnnotation is wrapped by every error of CheckAnnotation.
var ErrAnnotation = errors.New("annotation not allowed")

// HypervisorAnnotations returns the names of Kata's hypervisor annotations that a platform may
// enable, sorted.
func HypervisorAnnotations() []string {
	var names []string
	for _, a := range hypervisorAnnotations {
		if a.refuse == "" {
			names = append(names, a.name)
		}
	}
	slices.Sort(names)
	return names
}

// KnownHypervisorAnnotation says whether name is one of Kata's hypervisor annotations, allowed or
// refused.
func KnownHypervisorAnnotation(name string) bool {
	return slices.ContainsFunc(hypervisorAnnotations, func(a struct{ name, refuse string }) bool { return a.name == name })
}

// CheckAnnotation accepts the name (the suffix after HypervisorAnnotationPrefix, exactly as Kata
// spells it) of a hypervisor annotation a platform may let pods set, and refuses, saying why, a
// dangerous one, a pattern, another family's annotation or an unknown name.
func CheckAnnotation(name string) error {
	for _, a := range hypervisorAnnotations {
		if a.name != name {
			continue
		}
		if a.refuse != "" {
			return fmt.Errorf("%w: %q can never be enabled: %s", ErrAnnotation, name, a.refuse)
		}
		return nil
	}
	switch {
	case strings.HasPrefix(name, "io.katacontainers."):
		if s, ok := strings.CutPrefix(name, HypervisorAnnotationPrefix); ok {
			return fmt.Errorf("%w: %q: give the name without %q, i.e. %q", ErrAnnotation, name, HypervisorAnnotationPrefix, s)
		}
		return fmt.Errorf("%w: %q is not a hypervisor annotation; Kata's Go runtime applies the runtime, agent and container families without checking enable_annotations, so none of them is ever passed to pods", ErrAnnotation, name)
	case strings.ContainsAny(name, `*?[]^$()|+\{}`):
		return fmt.Errorf("%w: %q is a pattern; list exact names (Kata treats each as a regular expression, so the drop-ins anchor it)", ErrAnnotation, name)
	}
	return fmt.Errorf("%w: %q is not one of Kata %s's hypervisor annotations; those a pod may be given: %s", ErrAnnotation, name, KataVersion, strings.Join(HypervisorAnnotations(), ", "))
}

// enableAnnotations renders enable_annotations: each name anchored, because both runtimes search
// the suffix with the pattern unanchored (Go regexp.MatchString, Rust RegexSet::is_match).
func enableAnnotations(names []string) string {
	patterns := make([]string, len(names))
	for i, n := range names {
		patterns[i] = "^" + regexpQuote(n) + "$"
	}
	return tomlList(patterns)
}

// regexpQuote escapes the one metacharacter Kata's annotation names contain ('.').
func regexpQuote(s string) string { return strings.ReplaceAll(s, ".", `\.`) }

// podAnnotations are the exact annotation names the containerd handlers pass to the shim. containerd
// matches each entry with path.Match (a glob), which matches these names only as they are.
func podAnnotations(names []string) []string {
	full := make([]string, len(names))
	for i, n := range names {
		full[i] = HypervisorAnnotationPrefix + n
	}
	return full
}
