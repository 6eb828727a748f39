package store

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Btrfs ioctls (linux/btrfs.h). x/sys/unix does not define them; the structs are 4096 bytes.
const (
	iocSubvolCreate = 0x5000940e // _IOW(0x94, 14, btrfs_ioctl_vol_args)
	iocSnapDestroy  = 0x5000940f // _IOW(0x94, 15, btrfs_ioctl_vol_args)
	iocInoLookup    = 0xd0009412 // _IOWR(0x94, 18, btrfs_ioctl_ino_lookup_args)
	iocSnapCreateV2 = 0x50009417 // _IOW(0x94, 23, btrfs_ioctl_vol_args_v2)

	subvolRdonly   = 1 << 1 // BTRFS_SUBVOL_RDONLY
	firstFreeObjID = 256    // BTRFS_FIRST_FREE_OBJECTID: inode number of a subvolume root
)

type volArgs struct {
	fd   int64
	name [4088]byte
}

type volArgsV2 struct {
	fd      int64
	transid uint64
	flags   uint64
	unused  [4]uint64
	name    [4040]byte
}

type inoLookupArgs struct {
	treeid   uint64
	objectid uint64
	name     [4080]byte
}

func ioctl(fd int, req uintptr, arg unsafe.Pointer) error {
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), req, uintptr(arg)); e != 0 {
		return e
	}
	return nil
}

// subvolCreate creates an empty subvolume name in the directory dirfd.
func subvolCreate(dirfd int, name string) error {
	var a volArgs
	copy(a.name[:len(a.name)-1], name)
	if err := ioctl(dirfd, iocSubvolCreate, unsafe.Pointer(&a)); err != nil {
		return fmt.Errorf("create subvolume %s: %w", name, err)
	}
	return nil
}

// snapshot snapshots the subvolume open at srcfd as name in the directory dirfd.
func snapshot(srcfd, dirfd int, name string, readonly bool) error {
	a := volArgsV2{fd: int64(srcfd)}
	if readonly {
		a.flags = subvolRdonly
	}
	copy(a.name[:len(a.name)-1], name)
	if err := ioctl(dirfd, iocSnapCreateV2, unsafe.Pointer(&a)); err != nil {
		return fmt.Errorf("snapshot %s: %w", name, err)
	}
	return nil
}

// subvolDelete deletes the subvolume name in dirfd. The kernel refuses anything that is not a
// subvolume root (a symlink or a plain directory), so it never deletes what it was not meant to.
func subvolDelete(dirfd int, name string) error {
	var a volArgs
	copy(a.name[:len(a.name)-1], name)
	if err := ioctl(dirfd, iocSnapDestroy, unsafe.Pointer(&a)); err != nil {
		return fmt.Errorf("delete subvolume %s: %w", name, err)
	}
	return nil
}

// subvolID returns the Btrfs tree id of the subvolume fd is in. It is stable across remounts,
// which is what lets recovery tell the old current/ from the new one after an exchange.
func subvolID(fd int) (uint64, error) {
	a := inoLookupArgs{objectid: firstFreeObjID}
	if err := ioctl(fd, iocInoLookup, unsafe.Pointer(&a)); err != nil {
		return 0, fmt.Errorf("subvolume id: %w", err)
	}
	return a.treeid, nil
}

// isSubvol reports whether fd is the root directory of a Btrfs subvolume.
func isSubvol(fd int) (bool, error) {
	var fs unix.Statfs_t
	if err := unix.Fstatfs(fd, &fs); err != nil {
		return false, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return false, err
	}
	return uint32(fs.Type) == unix.BTRFS_SUPER_MAGIC && st.Ino == firstFreeObjID &&
		st.Mode&unix.S_IFMT == unix.S_IFDIR, nil
}
