package kata

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
)

// Boot is what decides the kernel command line Kata's runtimes (Kata KataVersion, QEMU on x86_64,
// machine type q35) pass to the guest. Zero values are Kata's shipped configuration-qemu.toml
// (Go runtime) and configuration-qemu-runtime-rs.toml (runtime-rs).
type Boot struct {
	// Image selects image mode (the image attached as a disk, root= on the command line); false is
	// initrd mode, where the kernel runs /init from the initrd and Kata adds no root= or systemd.*.
	Image bool
	// DisableImageNvdimm is disable_image_nvdimm: attach the image as virtio-blk (/dev/vda1) instead
	// of as an NVDIMM (/dev/pmem0p1, mounted with dax). Image only.
	DisableImageNvdimm bool
	// RootfsType is rootfs_type: "ext4" (default), "xfs" or "erofs". Image only.
	RootfsType string
	// KernelVerityParams is kernel_verity_params: the root then goes through dm-verity. Image only.
	KernelVerityParams string
	// MaxVCPUs is default_maxvcpus as the runtime resolved it (0 in the file means the host's CPU
	// count): Kata passes nr_cpus=MaxVCPUs. Required.
	MaxVCPUs int
	// GuestSELinux is disable_guest_selinux = false: selinux=1 instead of the shipped selinux=0.
	GuestSELinux bool
	// Debug is [hypervisor.qemu] enable_debug: "debug" instead of "quiet" (and systemd's debug
	// parameters in image mode); runtime-rs adds agent.log_vport=1025 instead.
	Debug bool
	// IOMMU is [hypervisor.qemu] enable_iommu (or its pod annotation): intel_iommu=on iommu=pt.
	IOMMU bool
	// BlockDeviceDriver is block_device_driver: "virtio-scsi" (default, as shipped on x86_64) adds
	// scsi_mod.scan=none; "virtio-blk" adds nothing.
	BlockDeviceDriver string
	// Agent are the [agent.kata] settings that become agent.* parameters.
	Agent Agent
	// KernelParams is the configuration's kernel_params, one parameter per element; Kata appends
	// it last, so its values win over the defaults.
	KernelParams []string
}

// Agent holds the [agent.kata] settings that Kata turns into kernel parameters.
type Agent struct {
	Debug             bool   // enable_debug: agent.log=debug
	Trace             bool   // enable_tracing: agent.trace=true
	ContainerPipeSize uint32 // container_pipe_size: agent.container_pipe_size=N when > 0
	DebugConsole      bool   // debug_console_enabled: agent.debug_console agent.debug_console_vport=1026
	// CDHAPITimeout is cdh_api_timeout in seconds (runtime-rs: cdh_api_timeout_ms / 1000): 0 is
	// both runtimes' shipped 50, NoCDHAPITimeout a configured 0, which drops the parameter.
	CDHAPITimeout        int
	LaunchProcessTimeout uint32 // launch_process_timeout: agent.launch_process_timeout=N when > 0
	VisibleCDIDevices    bool   // visible_cdi_devices: agent.visible_cdi_devices=true
}

// Kata's shipped agent settings that reach the command line.
const (
	DefaultCDHAPITimeout = 50 // [agent.kata] cdh_api_timeout; runtime-rs default_cdh_api_timeout_ms
	NoCDHAPITimeout      = -1 // Agent.CDHAPITimeout for cdh_api_timeout = 0
)

// Root devices Kata boots an image from on x86_64 (virtcontainers: VirtioBlk and Nvdimm).
const (
	RootVirtioBlk    = "/dev/vda1"
	RootNvdimm       = "/dev/pmem0p1"
	hashVirtioBlk    = "/dev/vda2"
	hashNvdimm       = "/dev/pmem0p2"
	debugConsolePort = "1026"
	logVsockPort     = "1025" // runtime-rs agent.log_vport with enable_debug
)

// fixedParams are qemu_amd64.go's kernelParams, in order.
var fixedParams = []string{
	"tsc=reliable", "no_timer_check", "rcupdate.rcu_expedited=1",
	"i8042.direct=1", "i8042.dumbkbd=1", "i8042.nopnp=1", "i8042.noaux=1",
	"noreplace-smp", "reboot=k", "cryptomgr.notests", "net.ifnames=0", "pci=lastbus=0",
}

// systemdParams are katautils' systemdKernelParam, added in image mode ("needSystemd").
var systemdParams = []string{
	"systemd.unit=kata-containers.target",
	"systemd.mask=systemd-networkd.service",
	"systemd.mask=systemd-networkd.socket",
}

// ErrBoot is wrapped by every error of KernelParams.
var ErrBoot = errors.New("invalid kata boot")

// KernelParams returns the kernel command line Kata KataVersion's Go runtime passes to QEMU for b,
// one kernel parameter per element, in Kata's order; strings.Join(params, " ") is QEMU's -append.
// The order (virtcontainers qemu.go kernelParameters, katautils config.go SetKernelParams):
//
//  1. qemu_amd64.go's fixed kernelParams (tsc=reliable ... pci=lastbus=0), intel_iommu=on iommu=pt
//     with enable_iommu (newQemuArch);
//  2. image mode: the root parameters (handleImagePath, GetKernelRootParams);
//  3. console=hvc0 console=hvc1 (qemu_arch_base.go appendConsole, virtio-serial console);
//  4. quiet, or debug; image mode adds systemd.show_status=false (debug: =true systemd.log_level=debug);
//  5. panic=1 (defaultKernelParameters), nr_cpus=MaxVCPUs, selinux=0 (or 1);
//  6. the hypervisor's KernelParams list: image mode's systemd.unit/systemd.mask, scsi_mod.scan=none
//     for virtio-scsi, the agent.* options (kata_agent.go KataAgentKernelParams: agent.log,
//     agent.trace, agent.container_pipe_size, agent.debug_console(_vport), agent.cdh_api_timeout=50
//     as shipped, agent.launch_process_timeout, agent.visible_cdi_devices), then the
//     configuration's kernel_params.
func KernelParams(b Boot) ([]string, error) {
	if err := b.check(); err != nil {
		return nil, err
	}
	p := slices.Clone(fixedParams)
	if b.IOMMU {
		p = append(p, iommuParams...)
	}
	if b.Image {
		root, err := rootParams(b)
		if err != nil {
			return nil, err
		}
		p = append(p, root...)
	}
	p = append(p, "console=hvc0", "console=hvc1")
	p = append(p, verbosity(b)...)
	p = append(p, "panic=1", "nr_cpus="+strconv.Itoa(b.MaxVCPUs), selinux(b.GuestSELinux))
	if b.Image {
		p = append(p, systemdParams...)
	}
	if b.BlockDeviceDriver != "virtio-blk" {
		p = append(p, "scsi_mod.scan=none")
	}
	p = append(p, b.Agent.params()...)
	return append(p, b.KernelParams...), nil
}

// iommuParams are what enable_iommu adds on x86_64, in both runtimes.
var iommuParams = []string{"intel_iommu=on", "iommu=pt"}

// check refuses what neither runtime would boot.
func (b Boot) check() error {
	switch {
	case b.MaxVCPUs < 1:
		return fmt.Errorf("%w: MaxVCPUs is %d: set default_maxvcpus as the runtime resolves it (0 in the file means the host's CPU count)", ErrBoot, b.MaxVCPUs)
	case !b.Image && (b.DisableImageNvdimm || b.RootfsType != "" || b.KernelVerityParams != ""):
		return fmt.Errorf("%w: DisableImageNvdimm, RootfsType and KernelVerityParams apply to image mode only: set Image or leave them zero", ErrBoot)
	case b.BlockDeviceDriver != "" && b.BlockDeviceDriver != "virtio-scsi" && b.BlockDeviceDriver != "virtio-blk":
		return fmt.Errorf("%w: BlockDeviceDriver %q: use \"virtio-scsi\" (Kata's x86_64 default) or \"virtio-blk\"", ErrBoot, b.BlockDeviceDriver)
	case b.Agent.CDHAPITimeout < NoCDHAPITimeout:
		return fmt.Errorf("%w: Agent.CDHAPITimeout is %d: give seconds, 0 for Kata's %d, or NoCDHAPITimeout", ErrBoot, b.Agent.CDHAPITimeout, DefaultCDHAPITimeout)
	}
	return nil
}

// verbosity is kernelParamsNonDebug or kernelParamsDebug, with the systemd ones in image mode.
func verbosity(b Boot) []string {
	switch {
	case b.Debug && b.Image:
		return []string{"debug", "systemd.show_status=true", "systemd.log_level=debug"}
	case b.Debug:
		return []string{"debug"}
	case b.Image:
		return []string{"quiet", "systemd.show_status=false"}
	}
	return []string{"quiet"}
}

func selinux(on bool) string {
	if on {
		return "selinux=1"
	}
	return "selinux=0"
}

// params is kata_agent.go's KataAgentKernelParams for the settings Agent holds, in its order.
func (a Agent) params() []string {
	var p []string
	if a.Debug {
		p = append(p, "agent.log=debug")
	}
	if a.Trace {
		p = append(p, "agent.trace=true")
	}
	if a.ContainerPipeSize > 0 {
		p = append(p, "agent.container_pipe_size="+strconv.FormatUint(uint64(a.ContainerPipeSize), 10))
	}
	if a.DebugConsole {
		p = append(p, "agent.debug_console", "agent.debug_console_vport="+debugConsolePort)
	}
	if t := a.cdhAPITimeout(); t > 0 {
		p = append(p, "agent.cdh_api_timeout="+strconv.Itoa(t))
	}
	if a.LaunchProcessTimeout > 0 {
		p = append(p, "agent.launch_process_timeout="+strconv.FormatUint(uint64(a.LaunchProcessTimeout), 10))
	}
	if a.VisibleCDIDevices {
		p = append(p, "agent.visible_cdi_devices=true")
	}
	return p
}

func (a Agent) cdhAPITimeout() int {
	switch a.CDHAPITimeout {
	case 0:
		return DefaultCDHAPITimeout
	case NoCDHAPITimeout:
		return 0
	}
	return a.CDHAPITimeout
}

// rootParams is GetKernelRootParams on x86_64 (dax on whenever NVDIMM is), split into kernel
// parameters: Kata's single Param rootflags="data=ordered,errors=remount-ro ro" is two words.
func rootParams(b Boot) ([]string, error) {
	fs := b.RootfsType
	if fs == "" {
		fs = "ext4"
	}
	if !slices.Contains(rootfsTypes, fs) {
		return nil, fmt.Errorf("%w: RootfsType %q: use one of ext4, xfs, erofs", ErrBoot, fs)
	}
	dev, hash := NvdimmData, NvdimmHash
	if b.DisableImageNvdimm {
		dev, hash = VirtioBlkData, VirtioBlkHash
	}
	if b.KernelVerityParams != "" { // the dm-verity form, from verity.go
		p, err := VerityCmdline(b.KernelVerityParams, dev, hash, fs)
		if err != nil {
			return nil, fmt.Errorf("%w: KernelVerityParams: %w", ErrBoot, err)
		}
		return p, nil
	}
	dax := !b.DisableImageNvdimm
	p := []string{"root=" + dev}
	switch {
	case fs == "ext4" && dax:
		p = append(p, "rootflags=dax,data=ordered,errors=remount-ro", "ro")
	case fs == "ext4":
		p = append(p, "rootflags=data=ordered,errors=remount-ro", "ro")
	case dax: // xfs, erofs: Kata's rootflags value is "dax ro"
		p = append(p, "rootflags=dax", "ro")
	default: // Kata's rootflags value is "ro": the word "rootflags=ro"
		p = append(p, "rootflags=ro")
	}
	return append(p, "rootfstype="+fs), nil
}
