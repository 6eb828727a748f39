package sessionshare

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/allox-os/allox/internal/rpc"
)

// resolve is how every path is opened beneath a scope: no "..", no absolute path, no symlink
// anywhere (one swapped in during the request too), no magic link.
const resolve = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS

// openBeneath opens path beneath the directory dirfd with flags (O_CLOEXEC|O_NOFOLLOW added).
func openBeneath(dirfd int, path string, flags int) (int, error) {
	for {
		fd, err := unix.Openat2(dirfd, path, &unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC | unix.O_NOFOLLOW), Resolve: resolve})
		if err == unix.EINTR || err == unix.EAGAIN { // EAGAIN: a rename raced the lookup
			continue
		}
		return fd, err
	}
}

// checkScope checks a share.enable scope: "" or a clean relative path of a directory of current/.
func checkScope(scope string) error {
	switch {
	case scope == "":
		return nil
	case filepath.IsAbs(scope):
		return errors.New("it is absolute: name a directory of current/ relative to it, e.g. \"output\", or leave it out for all of current/")
	case filepath.Clean(scope) != scope || scope == "." || scope == ".." || strings.HasPrefix(scope, "../"):
		return fmt.Errorf("it is not a clean path inside current/: use e.g. %q", "output")
	}
	return nil
}

// checkPath checks a requested path lexically (the kernel checks it again at the open): it must
// be relative and stay inside the scope. It returns the path cleaned ("." for the scope's root).
func checkPath(path string) (string, *refusal) {
	switch {
	case strings.ContainsRune(path, 0):
		return "", refuse(rpc.CodeInvalidParams, "params.path", "the path contains a NUL byte")
	case filepath.IsAbs(path):
		return "", refuse(rpc.CodeForbidden, "params.path", "outside the scope: an absolute path; name it relative to the target's scope")
	}
	c := filepath.Clean("./" + path)
	if c == ".." || strings.HasPrefix(c, "../") {
		return "", refuse(rpc.CodeForbidden, "params.path", "outside the scope: the path climbs out of it with ..")
	}
	return c, nil
}

// openError turns an openat2 error into the refusal a caller sees.
func openError(err error) *refusal {
	switch {
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENOTDIR):
		return refuse(rpc.CodeNotFound, "params.path", "no such file or directory in the target's scope")
	case errors.Is(err, unix.ELOOP):
		return refuse(rpc.CodeForbidden, "params.path", "a symlink: share follows no symlink (the path or one of its directories is one)")
	case errors.Is(err, unix.EXDEV):
		return refuse(rpc.CodeForbidden, "params.path", "outside the scope: the path resolves out of it")
	case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM):
		return refuse(rpc.CodeForbidden, "params.path", "permission denied")
	case errors.Is(err, unix.ENXIO), errors.Is(err, unix.EWOULDBLOCK):
		return refuse(rpc.CodeForbidden, "params.path", "not a regular file")
	}
	return refuse(rpc.CodeInternal, "params.path", err.Error())
}

// fileType names st's type as shareproto.Entry does.
func fileType(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return "file"
	case unix.S_IFDIR:
		return "dir"
	case unix.S_IFLNK:
		return "symlink"
	}
	return "other"
}

// regular checks that st is a regular file with one link.
func regular(st *unix.Stat_t) *refusal {
	switch {
	case st.Mode&unix.S_IFMT == unix.S_IFDIR:
		return refuse(rpc.CodeInvalidParams, "params.path", "a directory: list it with share ls, or name a file in it")
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return refuse(rpc.CodeForbidden, "params.path", fmt.Sprintf("not a regular file (a %s): share reads and writes regular files only", kind(st.Mode)))
	case st.Nlink > 1:
		return refuse(rpc.CodeForbidden, "params.path", fmt.Sprintf("a hard link (%d links): a hard link can name a file outside the scope, so share refuses it; copy the file instead of linking it", st.Nlink))
	}
	return nil
}

func kind(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFIFO:
		return "FIFO"
	case unix.S_IFSOCK:
		return "socket"
	case unix.S_IFCHR:
		return "character device"
	case unix.S_IFBLK:
		return "block device"
	case unix.S_IFLNK:
		return "symlink"
	}
	return "special file"
}

// scopeDir opens the directory of target's scope (O_PATH is not enough: it is a dirfd for
// openat2 and for the listing).
func (p *Plugin) scopeDir(target key, scope string) (*os.File, *refusal) {
	current, _, _, err := p.ws.SessionPaths(target.agent, target.session)
	if err != nil {
		return nil, refuse(rpc.CodeNotFound, "params.target", fmt.Sprintf("no such session: %v", err))
	}
	root, err := unix.Open(current, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, refuse(rpc.CodeInternal, "params.target", fmt.Sprintf("open the target's current/: %v", err))
	}
	if scope == "" {
		return os.NewFile(uintptr(root), current), nil
	}
	defer unix.Close(root)
	fd, err := openBeneath(root, scope, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		r := openError(err)
		r.field, r.reason = "params.target", "its shared scope current/"+scope+" cannot be opened: "+r.reason
		return nil, r
	}
	return os.NewFile(uintptr(fd), filepath.Join(current, scope)), nil
}
