package kata

import "fmt"

// DefaultBlockDeviceDriver is block_device_driver in Kata's shipped x86_64 QEMU configurations.
const DefaultBlockDeviceDriver = "virtio-scsi"

// blockDriverSymbols are the guest kernel symbols (built in: Kata kernels have modules off) each
// block_device_driver needs for the disks it attaches (container root filesystems on block
// devices, hot-plugged volumes) to appear in the guest.
var blockDriverSymbols = map[string][]string{
	// A virtio-scsi-pci controller with scsi-hd disks: the SCSI midlayer, the virtio HBA, sd disks.
	"virtio-scsi": {"SCSI", "SCSI_VIRTIO", "BLK_DEV_SD"},
	// virtio-blk-pci disks (/dev/vd*).
	"virtio-blk": {"VIRTIO_BLK"},
}

// BlockDriverKernelSymbols returns the kernel config symbols block_device_driver needs; "" means
// Kata's default. Drivers this appliance does not model (nvdimm, virtio-blk-ccw, virtio-mmio) are
// an error naming the ones it does.
func BlockDriverKernelSymbols(driver string) ([]string, error) {
	if driver == "" {
		driver = DefaultBlockDeviceDriver
	}
	syms, ok := blockDriverSymbols[driver]
	if !ok {
		return nil, fmt.Errorf("block_device_driver %q: use \"virtio-scsi\" (Kata's x86_64 default) or \"virtio-blk\"", driver)
	}
	return append([]string(nil), syms...), nil
}
