package kata

import (
	"fmt"
	"slices"
)

// Root block devices as Kata's runtimes name them for an image with a dm-verity hash partition.
const (
	VirtioBlkData = "/dev/vda1"    // disable_image_nvdimm = true
	VirtioBlkHash = "/dev/vda2"    //
	NvdimmData    = "/dev/pmem0p1" // the x86 QEMU default
	NvdimmHash    = "/dev/pmem0p2" //
	VerityRoot    = "/dev/dm-0"    // the device dm-mod.create makes, the root with verity on
)

// VerityCmdline returns the root parameters Kata's runtimes (Go: GetKernelRootParams, Rust:
// new_rootfs_kernel_params) put on the kernel command line for kernel_verity_params: a dm-verity
// device created at boot by dm-mod.create over dataDev and hashDev (hash offset 0, no superblock,
// sha256), mounted as the root. Kata passes rootflags without dax even on NVDIMM; the value
// "data=ordered,errors=remount-ro ro" is split as the kernel reads it, so "ro" is its own word.
func VerityCmdline(params, dataDev, hashDev, rootfsType string) ([]string, error) {
	v, err := ParseKernelVerityParams(params)
	if err != nil {
		return nil, fmt.Errorf("kernel_verity_params: %w", err)
	}
	if v.Salt == "" {
		return nil, fmt.Errorf("kernel_verity_params: salt is empty; Kata's runtimes refuse an unsalted tree: format it with a salt")
	}
	if dataDev == "" || hashDev == "" || dataDev == hashDev {
		return nil, fmt.Errorf("verity devices %q and %q: want two different block devices, e.g. %s and %s",
			dataDev, hashDev, VirtioBlkData, VirtioBlkHash)
	}
	var flags []string
	switch rootfsType {
	case "", "ext4":
		rootfsType, flags = "ext4", []string{"rootflags=data=ordered,errors=remount-ro", "ro"}
	case "xfs", "erofs":
		flags = []string{"rootflags=ro"}
	default:
		return nil, fmt.Errorf("rootfs_type %q: Kata's runtimes support ext4, xfs and erofs under dm-verity", rootfsType)
	}
	sectors := uint64(v.DataBlockSize/512) * v.DataBlocks
	table := fmt.Sprintf("dm-verity,,,ro,0 %d verity 1 %s %s %d %d %d 0 sha256 %s %s",
		sectors, dataDev, hashDev, v.DataBlockSize, v.HashBlockSize, v.DataBlocks, v.RootHash, v.Salt)
	return slices.Concat([]string{`dm-mod.create="` + table + `"`, "root=" + VerityRoot}, flags,
		[]string{"rootfstype=" + rootfsType}), nil
}
