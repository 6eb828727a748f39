package system

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// fsNames maps statfs magics to filesystem names. ext2, ext3 and ext4 share one magic and are
// reported as "ext4".
var fsNames = map[uint32]string{
	unix.BTRFS_SUPER_MAGIC:     "btrfs",
	unix.TMPFS_MAGIC:           "tmpfs",
	unix.EXT4_SUPER_MAGIC:      "ext4",
	unix.XFS_SUPER_MAGIC:       "xfs",
	unix.EROFS_SUPER_MAGIC_V1:  "erofs",
	unix.SQUASHFS_MAGIC:        "squashfs",
	unix.OVERLAYFS_SUPER_MAGIC: "overlay",
	unix.RAMFS_MAGIC:           "ramfs",
	unix.PROC_SUPER_MAGIC:      "proc",
	unix.SYSFS_MAGIC:           "sysfs",
	unix.CGROUP2_SUPER_MAGIC:   "cgroup2",
	unix.CGROUP_SUPER_MAGIC:    "cgroup",
	unix.NFS_SUPER_MAGIC:       "nfs",
	unix.FUSE_SUPER_MAGIC:      "fuse",
	unix.V9FS_MAGIC:            "9p",
	unix.F2FS_SUPER_MAGIC:      "f2fs",
	unix.MSDOS_SUPER_MAGIC:     "vfat",
	unix.ZONEFS_MAGIC:          "zonefs",
	0x2fc12fc1:                 "zfs", // not a kernel constant: ZFS is out of tree
}

// FSTypeName names a filesystem by its statfs magic, or returns the magic in hex ("0x1234abcd")
// when it is not one this daemon knows.
func FSTypeName(magic uint32) string {
	if name, ok := fsNames[magic]; ok {
		return name
	}
	return fmt.Sprintf("%#x", magic)
}
