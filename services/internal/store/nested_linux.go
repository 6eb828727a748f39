package store

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path"
	"sort"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Ioctls for nested subvolumes (linux/btrfs.h, kernel ≥ 4.18).
const (
	iocSubvolGetflags   = 0x80089419 // _IOR(0x94, 25, __u64)
	iocSubvolSetflags   = 0x4008941a // _IOW(0x94, 26, __u64)
	iocGetSubvolRootref = 0xd000943d // _IOWR(0x94, 61, btrfs_ioctl_get_subvol_rootref_args)
	iocInoLookupUser    = 0xd000943e // _IOWR(0x94, 62, btrfs_ioctl_ino_lookup_user_args)
)

type rootrefArgs struct {
	minTreeID uint64
	refs      [255]struct{ treeID, dirID uint64 }
	num       uint8
	_         [7]uint8
}

type inoLookupUserArgs struct {
	dirID  uint64
	treeID uint64
	name   [256]byte
	path   [3824]byte
}

// nested is a subvolume directly below another one: Path is its place relative to the parent's
// root directory ("x/y" for <parent>/x/y).
type nested struct {
	Path   string
	TreeID uint64
}

// childSubvols lists the subvolumes whose parent is the subvolume open at fd (its root
// directory), sorted by path. Btrfs keeps these back references itself, so this costs one ioctl
// however large the tree is, plus one per child found.
func childSubvols(fd int) ([]nested, error) {
	var out []nested
	a := rootrefArgs{}
	for {
		err := ioctl(fd, iocGetSubvolRootref, unsafe.Pointer(&a))
		if err != nil && !errors.Is(err, unix.EOVERFLOW) {
			return nil, fmt.Errorf("list nested subvolumes: %w", err)
		}
		for _, r := range a.refs[:a.num] {
			l := inoLookupUserArgs{dirID: r.dirID, treeID: r.treeID}
			if err := ioctl(fd, iocInoLookupUser, unsafe.Pointer(&l)); err != nil {
				return nil, fmt.Errorf("locate nested subvolume %d: %w", r.treeID, err)
			}
			dir := string(l.path[:cstrlen(l.path[:])]) // "" or "a/b/"
			out = append(out, nested{Path: dir + string(l.name[:cstrlen(l.name[:])]), TreeID: r.treeID})
		}
		if err == nil {
			break
		}
		a.num = 0 // EOVERFLOW: the kernel advanced minTreeID past what it returned
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

func cstrlen(b []byte) int {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		return i
	}
	return len(b)
}

// deleteSubvol deletes the subvolume name in dirfd and every subvolume nested below it, deepest
// first (Btrfs refuses to delete a subvolume that still holds one: ENOTEMPTY). A read-only
// subvolume that holds nested ones is made writable first, or they could not be unlinked. label
// names the subvolume in errors and in the step hook ("subvolume.delete <label>"), which runs
// before each deletion; its error is returned as that deletion's failure.
func (s *Store) deleteSubvol(dirfd int, name, label string) error {
	f, err := openSubvol(dirfd, name)
	if err != nil {
		return fmt.Errorf("delete subvolume %s: %w", label, err)
	}
	kids, err := childSubvols(int(f.Fd()))
	if err == nil && len(kids) > 0 {
		err = makeWritable(int(f.Fd()))
	}
	for _, k := range kids {
		if err != nil {
			break
		}
		err = s.deleteNested(f, k, label)
	}
	f.Close()
	if err != nil {
		return fmt.Errorf("delete subvolume %s: %w", label, err)
	}
	if h := s.hook(); h != nil {
		if err := h(stepSubvolDelete + " " + label); err != nil {
			return fmt.Errorf("delete subvolume %s: %w", label, err)
		}
	}
	return subvolDelete(dirfd, name)
}

func (s *Store) deleteNested(parent *os.File, k nested, label string) error {
	dir, base := path.Split(k.Path)
	d, err := openDir(int(parent.Fd()), "./"+dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return s.deleteSubvol(int(d.Fd()), base, label+"/"+k.Path)
}

// makeWritable clears the read-only flag of the subvolume open at fd.
func makeWritable(fd int) error {
	var flags uint64
	if err := ioctl(fd, iocSubvolGetflags, unsafe.Pointer(&flags)); err != nil {
		return fmt.Errorf("subvolume flags: %w", err)
	}
	if flags&subvolRdonly == 0 {
		return nil
	}
	flags &^= subvolRdonly
	if err := ioctl(fd, iocSubvolSetflags, unsafe.Pointer(&flags)); err != nil {
		return fmt.Errorf("make read-only subvolume writable to delete what it holds: %w", err)
	}
	return nil
}

// removeAll removes name in dirfd whatever it is: a file or symlink is unlinked, a subvolume is
// deleted with everything nested in it, a plain directory is emptied (the same way) and removed.
// Nothing is followed: no symlink leads it out of dirfd. It is for the store's own trees (a
// session's directory), which hold plain directories such as .run-tmp beside its subvolumes.
func (s *Store) removeAll(dirfd int, name, label string) error {
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return fmt.Errorf("remove %s: %w", label, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		if err := unix.Unlinkat(dirfd, name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("remove %s: %w", label, err)
		}
		return nil
	}
	d, err := openDir(dirfd, name)
	if err != nil {
		return fmt.Errorf("remove %s: %w", label, err)
	}
	if ok, err := isSubvol(int(d.Fd())); err != nil || ok {
		d.Close()
		if err != nil {
			return fmt.Errorf("remove %s: %w", label, err)
		}
		return s.deleteSubvol(dirfd, name, label)
	}
	names, err := d.Readdirnames(-1)
	sort.Strings(names)
	for _, n := range names {
		if err != nil {
			break
		}
		err = s.removeAll(int(d.Fd()), n, label+"/"+n)
	}
	d.Close()
	if err != nil {
		return err
	}
	if err := unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("remove %s: %w", label, err)
	}
	return nil
}
