package initramfs

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"syscall"
)

// FromDir builds a Tree from a staged directory: dir becomes "/". Owners, modes, symlinks, device nodes
// and fifos are taken as they are (lstat, links not followed); regular files refer to their host path
// through Source, so hard links become copies. Sockets are refused.
func FromDir(dir string) (*Tree, error) {
	t := &Tree{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		e, err := entryFromFile(p, path.Clean("/"+filepath.ToSlash(rel)))
		if err != nil {
			return err
		}
		return t.Add(e)
	})
	if err != nil {
		return nil, fmt.Errorf("tree from %s: %w", dir, err)
	}
	return t, nil
}

func entryFromFile(hostPath, treePath string) (Entry, error) {
	fi, err := os.Lstat(hostPath)
	if err != nil {
		return Entry{}, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return Entry{}, fmt.Errorf("BUG: lstat %s returned %T, not *syscall.Stat_t", hostPath, fi.Sys())
	}
	e := Entry{Path: treePath, Mode: fi.Mode() & supportedMode, UID: int(st.Uid), GID: int(st.Gid)}
	switch m := fi.Mode(); {
	case m&fs.ModeSocket != 0:
		return e, fmt.Errorf("%s: sockets cannot be stored in an image; remove it from the staged tree", hostPath)
	case m&fs.ModeSymlink != 0:
		e.Link, err = os.Readlink(hostPath)
	case m&fs.ModeDevice != 0:
		e.Major, e.Minor = devMajor(st.Rdev), devMinor(st.Rdev)
	case m.IsRegular():
		e.Source, e.Size = hostPath, fi.Size()
	case m&^(fs.ModeDir|fs.ModeNamedPipe|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky|fs.ModePerm) != 0:
		return e, fmt.Errorf("%s: unsupported file type %v", hostPath, m.Type())
	}
	return e, err
}

// devMajor and devMinor split a Linux dev_t (glibc's encoding).
func devMajor(dev uint64) uint32 { return uint32((dev>>8)&0xfff | (dev>>32)&^0xfff) }
func devMinor(dev uint64) uint32 { return uint32(dev&0xff | (dev>>12)&^0xff) }
