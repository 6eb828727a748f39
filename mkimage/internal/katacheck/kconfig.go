package katacheck

import (
	"fmt"
	"os"
	"strings"

	"github.com/allox-os/allox/deploy/kata"
	"github.com/allox-os/allox/kernel"
)

// symbols is what the guest kernel must have built in (=y) for the Kata runtime and agent.
type symbols struct {
	why  string
	syms []string
}

var (
	baseSymbols = []symbols{
		{"vsock, the agent's ttRPC transport", []string{"VSOCKETS", "VIRTIO_VSOCKETS"}},
		{"virtio-pci devices: disks, console", []string{"PCI", "VIRTIO_PCI", "VIRTIO_BLK", "VIRTIO_CONSOLE"}},
		{"PCI and ACPI hot-plug, how Kata adds devices", []string{"ACPI", "HOTPLUG_PCI", "HOTPLUG_PCI_PCIE", "HOTPLUG_PCI_ACPI"}},
		{"cgroup v2 and its controllers", []string{"CGROUPS", "MEMCG", "CGROUP_SCHED", "CGROUP_PIDS", "CPUSETS", "BLK_CGROUP"}},
		{"namespaces for containers", []string{"NAMESPACES", "UTS_NS", "IPC_NS", "PID_NS", "NET_NS", "USER_NS"}},
		{"seccomp filters for containers", []string{"SECCOMP", "SECCOMP_FILTER"}},
		{"devtmpfs, which the agent mounts", []string{"DEVTMPFS"}},
	}
	nvdimmSymbols = symbols{"the NVDIMM root with DAX", []string{"ACPI_NFIT", "LIBNVDIMM", "BLK_DEV_PMEM", "NVDIMM_PFN", "ZONE_DEVICE", "DAX", "FS_DAX"}}
	veritySymbols = symbols{"dm-verity from the command line (dm-mod.create)", []string{"MD", "BLK_DEV_DM", "DM_VERITY", "DM_INIT"}}
	fsSymbols     = map[string]string{"ext4": "EXT4_FS", "xfs": "XFS_FS", "erofs": "EROFS_FS"}
)

// required lists the symbol groups t needs.
func (t *Target) required() []symbols {
	req := append([]symbols{}, baseSymbols...)
	if t.imageMode() {
		if s, ok := fsSymbols[t.RootfsType]; ok {
			req = append(req, symbols{"the " + t.RootfsType + " root filesystem", []string{s}})
		}
	} else {
		req = append(req, symbols{"the initrd", []string{"BLK_DEV_INITRD"}})
	}
	if t.imageMode() && t.Nvdimm {
		req = append(req, nvdimmSymbols)
	}
	if t.imageMode() && t.Verity {
		req = append(req, veritySymbols)
	}
	return req
}

// blockDriver is the symbol group the drop-in's block_device_driver needs.
func (t *Target) blockDriver() (symbols, error) {
	syms, err := kata.BlockDriverKernelSymbols(t.BlockDeviceDriver)
	if err != nil {
		return symbols{}, err
	}
	name := t.BlockDeviceDriver
	if name == "" {
		name = kata.DefaultBlockDeviceDriver + " (Kata's default)"
	}
	return symbols{"block_device_driver = " + name, syms}, nil
}

// checkBlockDriver: the kernel has the driver Kata attaches block devices with.
func (t *Target) checkBlockDriver() error {
	g, err := t.blockDriver()
	if err != nil {
		return err
	}
	return t.checkSymbols([]symbols{g})
}

// checkKernelConfig: every required symbol is =y in the final .config.
func (t *Target) checkKernelConfig() error { return t.checkSymbols(t.required()) }

func (t *Target) checkSymbols(groups []symbols) error {
	f, err := os.Open(t.KernelConfig)
	if err != nil {
		return err
	}
	defer f.Close()
	settings, err := kernel.ParseConfig(f, t.KernelConfig)
	if err != nil {
		return err
	}
	cfg := kernel.ConfigOf(settings)
	var missing []string
	for _, g := range groups {
		var off []string
		for _, s := range g.syms {
			if v := cfg.Value(s); v != "y" {
				off = append(off, fmt.Sprintf("CONFIG_%s=%s", s, v))
			}
		}
		if len(off) > 0 {
			missing = append(missing, fmt.Sprintf("%s (for %s)", strings.Join(off, ", "), g.why))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%s lacks %s", t.KernelConfig, strings.Join(missing, "; "))
	}
	return nil
}
