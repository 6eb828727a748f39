package katacheck

import "context"

// Rule names, as reports print them.
const (
	RulePartitions   = "mbr-partitions"
	RuleRootfsType   = "rootfs-type"
	RuleInit         = "init-executable"
	RuleResolvConf   = "resolv-conf"
	RuleImageSize    = "image-size"
	RuleDAXHeader    = "nvdimm-dax-header"
	RuleKernelConfig = "kernel-config"
	RuleAgent        = "kata-agent"
	RuleBlockDriver  = "block-device-driver"
)

func always(*Target) bool      { return true }
func imageOnly(t *Target) bool { return t.imageMode() }

// Rules are the checks in the order they run.
func Rules() []Rule {
	return []Rule{
		{RulePartitions, "rebuild with `mkimage build`: Kata boots partition 1 (/dev/vda1, /dev/pmem0p1), which must start at 1 MiB " +
			"(3 MiB in MBR #1 behind the DAX header) and be the only partition, or be followed only by the dm-verity hash partition",
			imageOnly, func(_ context.Context, t *Target) error { return t.checkPartitions() }},
		{RuleRootfsType, "set kata rootfs_type to the filesystem partition 1 holds (mkimage writes ext4: rootfs_type = \"ext4\")",
			imageOnly, func(_ context.Context, t *Target) error { return t.checkRootfsType() }},
		{RuleInit, "install the init at /sbin/init (image) or /init (initrd), a regular file with mode 0755 " +
			"(symlinks are followed inside the image): Kata passes no init= and the kernel runs exactly that path",
			always, func(ctx context.Context, t *Target) error { return t.checkInit(ctx) }},
		{RuleResolvConf, "ship /etc/resolv.conf as an empty regular file (mode 0644), not a symlink: the Kata agent bind-mounts the sandbox's DNS settings onto it",
			always, func(ctx context.Context, t *Target) error { return t.checkResolvConf(ctx) }},
		{RuleImageSize, "pad the image (truncate -s) to a multiple of 128 MiB when attached as an NVDIMM (Kata's IMAGE_SIZE_ALIGNMENT_MB: " +
			"memory hot-plugged after it must start 128 MiB aligned), or of 512 bytes as virtio-blk; `mkimage build` with kata.nvdimm = true does it",
			imageOnly, func(_ context.Context, t *Target) error { return t.checkSize() }},
		{RuleDAXHeader, "set nvdimm = true in the spec's kata block so `mkimage build` writes the NVDIMM DAX header, " +
			"or attach the image as virtio-blk (disable_image_nvdimm = true); without the header the guest panics: \"DAX unsupported by block device\"",
			func(t *Target) bool { return t.imageMode() && t.Nvdimm },
			func(_ context.Context, t *Target) error { return t.checkDAX() }},
		{RuleAgent, "put the agent of your Kata release into the image: kata { agent { binary = \"/opt/kata/bin/kata-agent\" } } or " +
			"kata { agent { from_image = \"/opt/kata/share/kata-containers/kata-containers.img\" } } in the spec; without it a Kata runtime " +
			"waits for the agent on vsock and gives up (45 s). A warning unless the spec says require_agent = true",
			always, func(ctx context.Context, t *Target) error {
				err := t.checkAgent(ctx)
				if err != nil && !t.RequireAgent {
					return &warning{err}
				}
				return err
			}},
		{RuleKernelConfig, "enable the missing symbols with =y in kernel/fragments/*.conf (Kata guest kernels have modules off) and rebuild the kernel",
			always, func(_ context.Context, t *Target) error { return t.checkKernelConfig() }},
		{RuleBlockDriver, "enable the driver's symbols in kernel/fragments (virtio-scsi: CONFIG_SCSI, CONFIG_SCSI_VIRTIO and CONFIG_BLK_DEV_SD, " +
			"as 80-kata-block.conf does; virtio-blk: CONFIG_VIRTIO_BLK) and rebuild, or set block_device_driver to a driver the kernel has",
			always, func(_ context.Context, t *Target) error { return t.checkBlockDriver() }},
	}
}
