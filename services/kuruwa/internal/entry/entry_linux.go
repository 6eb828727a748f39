// Package entry makes Kuruwa's Unix socket entrances safely: each socket is 0600 in a directory
// that is 0700 and owned by the daemon's user, reached through no symlink and no directory
// another user could change; and it records who connected (SO_PEERCRED).
package entry

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/allox-os/allox/services/kuruwa/internal/dial"
	"golang.org/x/sys/unix"
)

// SecureDir creates dir (0700) if missing and checks that it and every parent are real
// directories, none a symlink, none writable by another user unless sticky and root-owned (like
// /tmp), and dir itself owned by this user with no group or other access.
func SecureDir(dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("directory %s: %w", dir, err)
	}
	euid := uint32(os.Geteuid())
	cur := "/"
	parts := splitPath(abs)
	for i, p := range parts {
		cur = filepath.Join(cur, p)
		var st unix.Stat_t
		err := unix.Lstat(cur, &st)
		if errors.Is(err, unix.ENOENT) {
			if err := unix.Mkdir(cur, 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
				return fmt.Errorf("create %s: %w", cur, err)
			}
			err = unix.Lstat(cur, &st)
		}
		if err != nil {
			return fmt.Errorf("directory %s: %w", cur, err)
		}
		switch {
		case st.Mode&unix.S_IFMT == unix.S_IFLNK:
			return fmt.Errorf("directory %s: is a symlink; Kuruwa refuses symlinked socket paths, use the real path", cur)
		case st.Mode&unix.S_IFMT != unix.S_IFDIR:
			return fmt.Errorf("directory %s: is not a directory", cur)
		case st.Uid != euid && st.Uid != 0:
			return fmt.Errorf("directory %s: owned by uid %d, not by this user (%d) or root; choose a directory of your own", cur, st.Uid, euid)
		case st.Mode&0o022 != 0 && !(st.Mode&unix.S_ISVTX != 0 && st.Uid == 0):
			return fmt.Errorf("directory %s: writable by other users (mode %o); chmod go-w it or choose another directory", cur, st.Mode&0o7777)
		}
		if i == len(parts)-1 {
			if st.Uid != euid {
				return fmt.Errorf("directory %s: owned by uid %d, must be owned by this user (%d)", cur, st.Uid, euid)
			}
			if st.Mode&0o077 != 0 {
				return fmt.Errorf("directory %s: mode %o gives other users access; it must be 0700 (chmod 700 %s)", cur, st.Mode&0o777, cur)
			}
		}
	}
	return nil
}

func splitPath(abs string) []string {
	var parts []string
	for d := abs; d != "/"; d = filepath.Dir(d) {
		parts = append([]string{filepath.Base(d)}, parts...)
	}
	return parts
}

// Listen makes dir safe and listens on dir/name with mode 0600. A stale socket left by a daemon
// that is gone is replaced; a live one, or anything that is not a socket, is refused.
func Listen(dir, name string) (*net.UnixListener, string, error) {
	if err := SecureDir(dir); err != nil {
		return nil, "", err
	}
	path := filepath.Join(dir, name)
	if err := clearStale(path); err != nil {
		return nil, "", err
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, "", fmt.Errorf("listen %s: %w", path, err)
	}
	ln.SetUnlinkOnClose(false)
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, "", fmt.Errorf("chmod %s: %w", path, err)
	}
	return ln, path, nil
}

func clearStale(path string) error {
	var st unix.Stat_t
	err := unix.Lstat(path, &st)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("socket %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return fmt.Errorf("socket %s: exists and is not a socket; remove it or choose another directory", path)
	}
	if c, err := net.Dial("unix", path); err == nil {
		c.Close()
		return fmt.Errorf("socket %s: a running daemon serves it; stop that daemon or choose another directory", path)
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("remove stale socket %s: %w", path, err)
	}
	return nil
}

// Peer is the process at the other end of a Unix connection, as the kernel recorded it at
// connect time.
type Peer struct {
	PID      int32
	UID, GID uint32
}

// PeerOf reads SO_PEERCRED of c.
func PeerOf(c *net.UnixConn) (Peer, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return Peer{}, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return Peer{}, err
	}
	if cerr != nil {
		return Peer{}, fmt.Errorf("SO_PEERCRED: %w", cerr)
	}
	return Peer{PID: cred.Pid, UID: cred.Uid, GID: cred.Gid}, nil
}

// Dial connects to the entry at path, refusing a symlink in its last component so a client is
// not redirected to another daemon.
func Dial(path string) (*net.UnixConn, error) {
	if err := dial.Check(path); err != nil {
		return nil, err
	}
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("entry %s: %w", path, err)
	}
	return c, nil
}
