package store

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// resolve is used for every path the store opens below its root: no symlinks (so nothing an agent
// plants can redirect the daemon), no escape from the root.
const resolve = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS

// openDir opens the directory rel below dirfd without following any symlink.
func openDir(dirfd int, rel string) (*os.File, error) {
	fd, err := unix.Openat2(dirfd, rel, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC | unix.O_NOFOLLOW,
		Resolve: resolve,
	})
	if err != nil {
		return nil, &os.PathError{Op: "openat2", Path: rel, Err: err}
	}
	return os.NewFile(uintptr(fd), rel), nil
}

// mkdirAll creates rel below dirfd one component at a time, refusing symlinks on the way.
func mkdirAll(dirfd int, rel string) error {
	parts := strings.Split(rel, "/")
	for i := range parts {
		p := strings.Join(parts[:i+1], "/")
		f, err := openDir(dirfd, p)
		if err == nil {
			f.Close()
			continue
		}
		if !errors.Is(err, unix.ENOENT) {
			return err
		}
		parent, err := openDir(dirfd, strings.Join(append([]string{"."}, parts[:i]...), "/"))
		if err != nil {
			return err
		}
		err = unix.Mkdirat(int(parent.Fd()), parts[i], 0o755)
		parent.Close()
		if err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("mkdir %s: %w", p, err)
		}
	}
	return nil
}

// openSubvol opens name in dirfd and checks it is really a Btrfs subvolume root: a symlink or a
// plain directory put in its place is refused, so checkpoint and rollback never "succeed" on it.
func openSubvol(dirfd int, name string) (*os.File, error) {
	f, err := openDir(dirfd, name)
	if err != nil {
		return nil, err
	}
	ok, err := isSubvol(int(f.Fd()))
	if err == nil && !ok {
		err = fmt.Errorf("%s is not a Btrfs subvolume (was it replaced?)", name)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// exists reports whether name exists in dirfd (without following it).
func existsAt(dirfd int, name string) (bool, error) {
	var st unix.Stat_t
	err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	if errors.Is(err, unix.ENOENT) {
		return false, nil
	}
	return err == nil, err
}

// subvolIDAt returns the subvolume id of name in dirfd, 0 if name does not exist.
func subvolIDAt(dirfd int, name string) (uint64, error) {
	if ok, err := existsAt(dirfd, name); !ok {
		return 0, err
	}
	f, err := openSubvol(dirfd, name)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return subvolID(int(f.Fd()))
}

type osFile = os.File
