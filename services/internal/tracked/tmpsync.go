package tracked

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// TmpSyncDir is where the private /tmp of a run is synced, inside current/.
const TmpSyncDir = ".allox-tmp"

// syncTmp copies the regular files, directories and inside-pointing
// relative symlinks of a run's private /tmp into current/.allox-tmp/,
// merging with what is there. Sockets, FIFOs and device nodes are skipped
// (they are kernel state and never enter a checkpoint), as are symlinks that
// point outside /tmp. Both trees are agent-controlled, so every access goes
// through os.Root: no symlink can lead the daemon out of either tree. What the sync creates
// belongs to owner (the run's identity), like everything else the run wrote.
func syncTmp(tmpDir, current string, owner [2]int) error {
	src, err := os.OpenRoot(tmpDir)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := os.OpenRoot(current)
	if err != nil {
		return err
	}
	defer dst.Close()
	if err := dst.MkdirAll(TmpSyncDir, 0o755); err != nil {
		return fmt.Errorf("%s: %w", TmpSyncDir, err)
	}
	if err := dst.Lchown(TmpSyncDir, owner[0], owner[1]); err != nil {
		return fmt.Errorf("%s: %w", TmpSyncDir, err)
	}
	var errs []error
	walkErr := fs.WalkDir(src.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			errs = append(errs, err)
			return nil
		}
		if p == "." {
			return nil
		}
		to := path.Join(TmpSyncDir, p)
		switch t := d.Type(); {
		case t.IsDir():
			err = dst.MkdirAll(to, 0o755)
		case t.IsRegular():
			err = copyRegular(src, dst, p, to)
		case t&fs.ModeSymlink != 0:
			err = copySymlink(src, dst, p, to)
		}
		if err == nil {
			err = dst.Lchown(to, owner[0], owner[1])
			if errors.Is(err, fs.ErrNotExist) {
				err = nil // a skipped entry
			}
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", p, err))
		}
		return nil
	})
	return errors.Join(append(errs, walkErr)...)
}

func copyRegular(src, dst *os.Root, from, to string) error {
	in, err := src.OpenFile(from, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return err // replaced by something else since the walk: skip
	}
	_ = dst.Remove(to) // never write through whatever is there now
	out, err := dst.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, fi.Mode().Perm())
	if err != nil {
		return err
	}
	if err := copyData(out, in, fi.Size()); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// copyData copies in to the empty out and keeps holes holes: a reflink (FICLONE) when both are
// on the same Btrfs, which the staging beside current/ is, shares the extents outright;
// elsewhere only the data segments SEEK_DATA/SEEK_HOLE report are copied and the file is
// extended to its size, so a sparse 1 GiB file stays a few blocks.
func copyData(out, in *os.File, size int64) error {
	if err := unix.IoctlFileClone(int(out.Fd()), int(in.Fd())); err == nil {
		return nil
	}
	for off := int64(0); off < size; {
		data, err := unix.Seek(int(in.Fd()), off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // only a hole is left
		}
		if err != nil {
			return fmt.Errorf("seek data: %w", err)
		}
		hole, err := unix.Seek(int(in.Fd()), data, unix.SEEK_HOLE)
		if err != nil {
			return fmt.Errorf("seek hole: %w", err)
		}
		if _, err := out.Seek(data, io.SeekStart); err != nil {
			return err
		}
		if _, err := io.Copy(out, io.NewSectionReader(in, data, hole-data)); err != nil {
			return err
		}
		off = hole
	}
	return out.Truncate(size)
}

func copySymlink(src, dst *os.Root, from, to string) error {
	target, err := src.Readlink(from)
	if err != nil {
		return err
	}
	inside := path.Clean(path.Join(path.Dir(from), target))
	if path.IsAbs(target) || inside == ".." || strings.HasPrefix(inside, "../") {
		return nil // points outside the private /tmp: skip
	}
	_ = dst.Remove(to)
	return dst.Symlink(target, to)
}
