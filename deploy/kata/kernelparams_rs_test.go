package kata

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The expected command lines are assembled by hand from Kata 4.1.0's runtime-rs
// (crates/hypervisor/src/kernel_param.rs KernelParams::new and new_rootfs_kernel_params,
// qemu/cmdline_generator.rs Kernel::new, add_iommu and add_console; kata-types config/mod.rs
// get_agent_kernel_params, agent.rs default_cdh_api_timeout_ms), not from RuntimeRsKernelParams.
const rsHead = "reboot=k panic=1 systemd.unit=kata-containers.target systemd.mask=systemd-networkd.service systemd.mask=systemd-networkd.socket"

func TestRuntimeRsKernelParams(t *testing.T) {
	for _, tt := range []struct {
		name string
		b    Boot
		want string
	}{{
		name: "image over virtio-blk-pci, shipped configuration",
		b:    Boot{Image: true, DisableImageNvdimm: true, MaxVCPUs: 2, KernelParams: strings.Fields(shippedUser)},
		want: rsHead + " root=/dev/vda1 rootflags=data=ordered,errors=remount-ro ro rootfstype=ext4 agent.cdh_api_timeout=50 " +
			shippedUser + " selinux=0 console=hvc0",
	}, {
		name: "image as virtio-pmem",
		b:    Boot{Image: true, MaxVCPUs: 1},
		want: rsHead + " root=/dev/pmem0p1 rootflags=dax,data=ordered,errors=remount-ro ro rootfstype=ext4 agent.cdh_api_timeout=50 selinux=0 console=hvc0",
	}, {
		name: "initrd keeps the systemd parameters",
		b:    Boot{MaxVCPUs: 1, KernelParams: []string{"allox.x=1"}},
		want: rsHead + " agent.cdh_api_timeout=50 allox.x=1 selinux=0 console=hvc0",
	}, {
		name: "dm-verity",
		b:    Boot{Image: true, DisableImageNvdimm: true, MaxVCPUs: 1, KernelVerityParams: verityVector},
		want: rsHead + ` dm-mod.create="dm-verity,,,ro,0 8 verity 1 /dev/vda1 /dev/vda2 4096 4096 1 0 sha256 abcd ef01" root=/dev/dm-0 rootflags=data=ordered,errors=remount-ro ro rootfstype=ext4` +
			" agent.cdh_api_timeout=50 selinux=0 console=hvc0",
	}, {
		name: "debug everywhere: agent options by name",
		b: Boot{Image: true, DisableImageNvdimm: true, MaxVCPUs: 8, Debug: true, GuestSELinux: true, IOMMU: true,
			Agent: Agent{Debug: true, Trace: true, ContainerPipeSize: 65536, DebugConsole: true,
				LaunchProcessTimeout: 15, VisibleCDIDevices: true},
			KernelParams: []string{"agent.log=info"}},
		want: rsHead + " agent.log_vport=1025 root=/dev/vda1 rootflags=data=ordered,errors=remount-ro ro rootfstype=ext4" +
			" agent.cdh_api_timeout=50 agent.container_pipe_size=65536 agent.debug_console agent.debug_console_vport=1026" +
			" agent.launch_process_timeout=15 agent.log=debug agent.trace=true agent.visible_cdi_devices=true agent.log=info" +
			" selinux=1 intel_iommu=on iommu=pt console=hvc0",
	}, {
		name: "cdh_api_timeout_ms = 0",
		b:    Boot{MaxVCPUs: 1, Agent: Agent{CDHAPITimeout: NoCDHAPITimeout}},
		want: rsHead + " selinux=0 console=hvc0",
	}} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := RuntimeRsKernelParams(tt.b)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, strings.Join(got, " ")); diff != "" {
				t.Errorf("command line (-Kata +RuntimeRsKernelParams):\n%s", diff)
			}
		})
	}
}
