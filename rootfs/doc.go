// Package rootfs builds the guest's root filesystem: a minimal Debian userland made by mmdebstrap from
// Debian packages (Fetch), read into an initramfs.Tree (Stage), overlaid with Allox's own files
// (Overlay.Apply), and written as the disk image Kata boots in image mode (WriteDisk): an MBR with one
// Linux partition at 1 MiB holding an ext4 filesystem, root=/dev/vda1, /sbin/init.
//
// With DiskOptions.Verity the image is laid out as Kata's measured rootfs: partition 1 the ext4
// filesystem, partition 2 (right after it, 1 MiB aligned) its dm-verity hash tree, made by Debian's
// veritysetup (FormatVerity) on the filesystem image file: format 1, sha256, 4 KiB blocks, no
// superblock (Kata's runtimes put hash offset 0 in the dm-verity table), a salt the caller derives.
// The kernel then mounts /dev/dm-0, built at boot from dm-mod.create (see deploy/kata.VerityCmdline).
//
// # Why the ext4 filesystem is made by mke2fs and not by go-diskfs
//
// go-diskfs v1.9.4 was tried on the real userland (about 1,400 entries, 30 MB) and cannot produce an
// image we can ship:
//
//   - Mknod and Link return "method not implemented": no /dev/console, no device nodes at all.
//   - Chown follows symlinks and there is no Lchown: a symlink cannot be given an owner, and chown on a
//     symlink whose target is absolute (/dev/fd -> /proc/self/fd) or not yet written fails.
//   - e2fsck -fn rejects even a freshly created, empty filesystem ("Resize inode not valid").
//   - There is no hash seed parameter, disk.CreateFilesystem ignores Reproducible for ext4 (random UUID),
//     and new inodes are stamped with time.Now(): not reproducible.
//
// So the filesystem is made by the reference tool, without root and without loop devices: the tree is
// written to a temporary directory (directories, files, symlinks, fifos; owners and modes do not
// matter there), `mke2fs -t ext4 -d` turns it into a filesystem image with a fixed UUID, hash seed and
// our own mke2fs.conf (so host defaults do not leak in), and one debugfs script then creates the device
// nodes and sets every inode's mode, owner and four timestamps from the tree. The last step is what
// makes the image reproducible: mke2fs 1.47.0 copies each staged file's ctime, which no process can
// choose. go-diskfs writes the MBR (diskfs.Create, mbr.Table); the filesystem image is copied into
// partition 1 directly, skipping zero blocks so the image stays sparse (mbr.Partition.WriteContents
// writes 512 bytes at a time, every byte, and computes offsets in uint32, so it fails at 4 GiB).
package rootfs
