package kata

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The expected command lines below are assembled by hand from Kata's sources (4.1.0,
// src/runtime/virtcontainers/qemu_amd64.go kernelParams, qemu_arch_base.go appendConsole,
// kernelParamsNonDebug and handleImagePath, hypervisor.go GetKernelRootParams, qemu.go
// kernelParameters, katautils create.go systemdKernelParam and config.go SetKernelParams,
// kata_agent.go KataAgentKernelParams), not from KernelParams.
const (
	kataFixed    = "tsc=reliable no_timer_check rcupdate.rcu_expedited=1 i8042.direct=1 i8042.dumbkbd=1 i8042.nopnp=1 i8042.noaux=1 noreplace-smp reboot=k cryptomgr.notests net.ifnames=0 pci=lastbus=0"
	kataConsole  = "console=hvc0 console=hvc1"
	kataSystemd  = "systemd.unit=kata-containers.target systemd.mask=systemd-networkd.service systemd.mask=systemd-networkd.socket"
	kataCDH      = "agent.cdh_api_timeout=50"                            // configuration-qemu.toml [agent.kata] cdh_api_timeout = 50
	shippedUser  = "cgroup_no_v1=all systemd.unified_cgroup_hierarchy=1" // amd64-options.mk KERNELPARAMS
	verityVector = "root_hash=abcd,salt=ef01,data_blocks=1,data_block_size=4096,hash_block_size=4096"
)

func TestKernelParams(t *testing.T) {
	shipped := strings.Fields(shippedUser)
	for _, tt := range []struct {
		name string
		b    Boot
		want string
	}{{
		name: "image as NVDIMM, shipped configuration-qemu.toml",
		b:    Boot{Image: true, MaxVCPUs: 2, KernelParams: shipped},
		want: kataFixed + " root=/dev/pmem0p1 rootflags=dax,data=ordered,errors=remount-ro ro rootfstype=ext4 " + kataConsole +
			" quiet systemd.show_status=false panic=1 nr_cpus=2 selinux=0 " + kataSystemd + " scsi_mod.scan=none " + kataCDH + " " + shippedUser,
	}, {
		name: "image over virtio-blk",
		b:    Boot{Image: true, DisableImageNvdimm: true, MaxVCPUs: 1, BlockDeviceDriver: "virtio-blk"},
		want: kataFixed + " root=/dev/vda1 rootflags=data=ordered,errors=remount-ro ro rootfstype=ext4 " + kataConsole +
			" quiet systemd.show_status=false panic=1 nr_cpus=1 selinux=0 " + kataSystemd + " " + kataCDH,
	}, {
		name: "initrd",
		b:    Boot{MaxVCPUs: 4, KernelParams: shipped},
		want: kataFixed + " " + kataConsole + " quiet panic=1 nr_cpus=4 selinux=0 scsi_mod.scan=none " + kataCDH + " " + shippedUser,
	}, {
		name: "erofs as NVDIMM",
		b:    Boot{Image: true, RootfsType: "erofs", MaxVCPUs: 1, BlockDeviceDriver: "virtio-blk"},
		want: kataFixed + " root=/dev/pmem0p1 rootflags=dax ro rootfstype=erofs " + kataConsole +
			" quiet systemd.show_status=false panic=1 nr_cpus=1 selinux=0 " + kataSystemd + " " + kataCDH,
	}, {
		name: "xfs over virtio-blk",
		b:    Boot{Image: true, DisableImageNvdimm: true, RootfsType: "xfs", MaxVCPUs: 1, BlockDeviceDriver: "virtio-blk"},
		want: kataFixed + " root=/dev/vda1 rootflags=ro rootfstype=xfs " + kataConsole +
			" quiet systemd.show_status=false panic=1 nr_cpus=1 selinux=0 " + kataSystemd + " " + kataCDH,
	}, {
		name: "debug everywhere",
		b: Boot{Image: true, DisableImageNvdimm: true, MaxVCPUs: 8, Debug: true, GuestSELinux: true,
			IOMMU: true,
			Agent: Agent{Debug: true, Trace: true, ContainerPipeSize: 65536, DebugConsole: true, CDHAPITimeout: 7,
				LaunchProcessTimeout: 15, VisibleCDIDevices: true},
			KernelParams: []string{"agent.log=info"}},
		want: kataFixed + " intel_iommu=on iommu=pt root=/dev/vda1 rootflags=data=ordered,errors=remount-ro ro rootfstype=ext4 " + kataConsole +
			" debug systemd.show_status=true systemd.log_level=debug panic=1 nr_cpus=8 selinux=1 " + kataSystemd +
			" scsi_mod.scan=none agent.log=debug agent.trace=true agent.container_pipe_size=65536 agent.debug_console agent.debug_console_vport=1026" +
			" agent.cdh_api_timeout=7 agent.launch_process_timeout=15 agent.visible_cdi_devices=true agent.log=info",
	}, {
		name: "cdh_api_timeout = 0",
		b:    Boot{MaxVCPUs: 1, BlockDeviceDriver: "virtio-blk", Agent: Agent{CDHAPITimeout: NoCDHAPITimeout}},
		want: kataFixed + " " + kataConsole + " quiet panic=1 nr_cpus=1 selinux=0",
	}, {
		// hypervisor_test.go TestGetKernelRootParams's verity case, with even-length hex.
		name: "dm-verity over virtio-blk",
		b:    Boot{Image: true, DisableImageNvdimm: true, MaxVCPUs: 1, BlockDeviceDriver: "virtio-blk", KernelVerityParams: verityVector},
		want: kataFixed + ` dm-mod.create="dm-verity,,,ro,0 8 verity 1 /dev/vda1 /dev/vda2 4096 4096 1 0 sha256 abcd ef01" root=/dev/dm-0 rootflags=data=ordered,errors=remount-ro ro rootfstype=ext4 ` +
			kataConsole + " quiet systemd.show_status=false panic=1 nr_cpus=1 selinux=0 " + kataSystemd + " " + kataCDH,
	}, {
		name: "dm-verity as NVDIMM, erofs",
		b:    Boot{Image: true, RootfsType: "erofs", MaxVCPUs: 1, BlockDeviceDriver: "virtio-blk", KernelVerityParams: verityVector},
		want: kataFixed + ` dm-mod.create="dm-verity,,,ro,0 8 verity 1 /dev/pmem0p1 /dev/pmem0p2 4096 4096 1 0 sha256 abcd ef01" root=/dev/dm-0 rootflags=ro rootfstype=erofs ` +
			kataConsole + " quiet systemd.show_status=false panic=1 nr_cpus=1 selinux=0 " + kataSystemd + " " + kataCDH,
	}} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := KernelParams(tt.b)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, strings.Join(got, " ")); diff != "" {
				t.Errorf("command line (-Kata +KernelParams):\n%s", diff)
			}
		})
	}
}

func TestKernelParamsVerityIsOneParameter(t *testing.T) {
	got, err := KernelParams(Boot{Image: true, MaxVCPUs: 1, KernelVerityParams: verityVector})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, p := range got {
		if strings.HasPrefix(p, "dm-mod.create=") {
			n++
			if !strings.HasSuffix(p, `"`) || strings.Count(p, `"`) != 2 {
				t.Errorf("dm-mod.create is not one quoted parameter: %q", p)
			}
		}
	}
	if n != 1 {
		t.Errorf("%d dm-mod.create parameters in %q; want 1", n, got)
	}
}

func TestKernelParamsErrors(t *testing.T) {
	for _, tt := range []struct {
		name string
		b    Boot
		want string
	}{
		{"no vcpus", Boot{Image: true}, "MaxVCPUs is 0"},
		{"bad fs", Boot{Image: true, MaxVCPUs: 1, RootfsType: "btrfs"}, `RootfsType "btrfs"`},
		{"bad verity", Boot{Image: true, MaxVCPUs: 1, KernelVerityParams: "root_hash=ab"}, "salt is missing"},
		{"verity with initrd", Boot{MaxVCPUs: 1, KernelVerityParams: verityVector}, "image mode only"},
		{"bad driver", Boot{MaxVCPUs: 1, BlockDeviceDriver: "nvme"}, `BlockDeviceDriver "nvme"`},
	} {
		_, err := KernelParams(tt.b)
		if !errors.Is(err, ErrBoot) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: KernelParams = %v; want ErrBoot containing %q", tt.name, err, tt.want)
		}
	}
}
