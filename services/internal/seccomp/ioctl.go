package seccomp

import "unsafe"

// The request numbers of ioctl(2) are built by the _IOC macro of <asm-generic/ioctl.h>:
// direction in bits 30-31, the size of the argument in bits 16-29, a type (the driver's magic)
// in bits 8-15 and a number in bits 0-7.
const (
	iocNRShift   = 0
	iocTypeShift = 8
	iocSizeShift = 16
	iocDirShift  = 30
	iocSizeMask  = 1<<14 - 1
	iocWrite     = 1 // _IOC_WRITE: user space passes data to the kernel
)

// iow is _IOW(typ, nr, size).
func iow(typ, nr, size uintptr) uint64 {
	if size > iocSizeMask {
		panic("BUG: ioctl argument larger than _IOC_SIZEMASK")
	}
	return uint64(iocWrite<<iocDirShift | size<<iocSizeShift | typ<<iocTypeShift | nr<<iocNRShift)
}

// The structures of <linux/btrfs.h> whose sizes are part of the request numbers.
type (
	// btrfsVolArgs is struct btrfs_ioctl_vol_args: a file descriptor and a name of up to
	// BTRFS_PATH_NAME_MAX (4087) bytes, 4096 bytes in all.
	btrfsVolArgs struct {
		fd   int64
		name [4087 + 1]byte
	}
	// btrfsVolArgsV2 is struct btrfs_ioctl_vol_args_v2: fd, transid, flags, a union of four
	// u64 (qgroup inheritance) and a name of up to BTRFS_SUBVOL_NAME_MAX (4039) bytes, 4096
	// bytes in all.
	btrfsVolArgsV2 struct {
		fd      int64
		transid uint64
		flags   uint64
		unused  [4]uint64
		name    [4039 + 1]byte
	}
)

// btrfsMagic is BTRFS_IOCTL_MAGIC.
const btrfsMagic = 0x94

// The Btrfs ioctls that create or delete subvolumes and snapshots, or change a subvolume's
// flags (read-only), as <linux/btrfs.h> defines them. A run's workspace is a subvolume that the
// daemon checkpoints and rolls back: these would let a run make or remove subvolumes beside
// the daemon's own, or flip a snapshot's read-only flag.
var (
	btrfsSnapCreate     = iow(btrfsMagic, 1, unsafe.Sizeof(btrfsVolArgs{}))
	btrfsSubvolCreate   = iow(btrfsMagic, 14, unsafe.Sizeof(btrfsVolArgs{}))
	btrfsSnapDestroy    = iow(btrfsMagic, 15, unsafe.Sizeof(btrfsVolArgs{}))
	btrfsSnapCreateV2   = iow(btrfsMagic, 23, unsafe.Sizeof(btrfsVolArgsV2{}))
	btrfsSubvolCreateV2 = iow(btrfsMagic, 24, unsafe.Sizeof(btrfsVolArgsV2{}))
	btrfsSubvolSetflags = iow(btrfsMagic, 26, unsafe.Sizeof(uint64(0)))
	btrfsSnapDestroyV2  = iow(btrfsMagic, 63, unsafe.Sizeof(btrfsVolArgsV2{}))
)
