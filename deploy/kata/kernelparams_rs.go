package kata

import (
	"cmp"
	"slices"
	"strconv"
)

// RuntimeRsKernelParams returns the kernel command line Kata KataVersion's runtime-rs passes to
// QEMU for b (with the drop-in's vm_rootfs_driver: virtio-blk-pci when DisableImageNvdimm, else
// virtio-pmem), one kernel parameter per element. It differs from the Go runtime's: no fixed x86
// list, quiet, nr_cpus or scsi_mod.scan, systemd.* in initrd mode too, one console, and the agent
// options sorted by name. The order (runtime-rs crates/hypervisor qemu/cmdline_generator.rs
// Kernel::new, QemuCmdLine::new and add_console; kernel_param.rs KernelParams::new and
// new_rootfs_kernel_params; runtimes manager.rs update_agent_kernel_params, which prepends
// kata-types TomlConfig::get_agent_kernel_params, a BTreeMap, to kernel_params):
//
//  1. reboot=k panic=1 systemd.unit=kata-containers.target and the two systemd.mask, then
//     agent.log_vport=1025 with enable_debug;
//  2. image mode: the root parameters (the same as the Go runtime's);
//  3. the agent.* options in name order, agent.cdh_api_timeout=50 as shipped, then the
//     configuration's kernel_params;
//  4. selinux=0 (or 1);
//  5. intel_iommu=on iommu=pt with enable_iommu (add_iommu);
//  6. console=hvc0 (add_console, when the VM starts).
func RuntimeRsKernelParams(b Boot) ([]string, error) {
	if err := b.check(); err != nil {
		return nil, err
	}
	p := []string{"reboot=k", "panic=1"}
	p = append(p, systemdParams...)
	if b.Debug {
		p = append(p, "agent.log_vport="+logVsockPort)
	}
	if b.Image {
		root, err := rootParams(b)
		if err != nil {
			return nil, err
		}
		p = append(p, root...)
	}
	p = append(p, b.Agent.sortedParams()...)
	p = append(p, b.KernelParams...)
	p = append(p, selinux(b.GuestSELinux))
	if b.IOMMU {
		p = append(p, iommuParams...)
	}
	return append(p, "console=hvc0"), nil
}

// sortedParams is get_agent_kernel_params: the same options as params, ordered by key.
func (a Agent) sortedParams() []string {
	type kv struct{ key, param string }
	var p []kv
	add := func(key, value string) {
		if value == "" {
			p = append(p, kv{key, key})
		} else {
			p = append(p, kv{key, key + "=" + value})
		}
	}
	if a.Debug {
		add("agent.log", "debug")
	}
	if a.Trace {
		add("agent.trace", "true")
	}
	if a.ContainerPipeSize > 0 {
		add("agent.container_pipe_size", strconv.FormatUint(uint64(a.ContainerPipeSize), 10))
	}
	if a.LaunchProcessTimeout > 0 {
		add("agent.launch_process_timeout", strconv.FormatUint(uint64(a.LaunchProcessTimeout), 10))
	}
	if t := a.cdhAPITimeout(); t > 0 {
		add("agent.cdh_api_timeout", strconv.Itoa(t))
	}
	if a.DebugConsole {
		add("agent.debug_console", "")
		add("agent.debug_console_vport", debugConsolePort)
	}
	if a.VisibleCDIDevices {
		add("agent.visible_cdi_devices", "true")
	}
	slices.SortFunc(p, func(x, y kv) int { return cmp.Compare(x.key, y.key) })
	out := make([]string, len(p))
	for i, e := range p {
		out[i] = e.param
	}
	return out
}
