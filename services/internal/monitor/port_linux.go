package monitor

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// reservePort binds a TCP socket to 127.0.0.1:0 without listening and returns it and its port:
// the port is the session's in the daemon's namespace, and connections to it are refused until
// listenReserved.
func reservePort() (*os.File, int, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, 0, os.NewSyscallError("socket", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		unix.Close(fd)
		return nil, 0, os.NewSyscallError("bind", err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		unix.Close(fd)
		return nil, 0, os.NewSyscallError("getsockname", err)
	}
	return os.NewFile(uintptr(fd), "otlp-reserved"), sa.(*unix.SockaddrInet4).Port, nil
}

// listenReserved starts listening on a reserved socket and returns it as a net.Listener (f is
// closed: the listener holds its own descriptor).
func listenReserved(f *os.File) (net.Listener, error) {
	defer f.Close()
	if err := unix.Listen(int(f.Fd()), unix.SOMAXCONN); err != nil {
		return nil, os.NewSyscallError("listen", err)
	}
	return net.FileListener(f)
}

// sessionListener serves, in the daemon's network namespace, only the connections that the
// session's own processes made. There every process of the guest reaches the port — the runs of
// sessions with their network disabled all share that namespace — so the port alone does not say
// whose a connection is: the socket at the other end does, by which cgroup's processes hold it.
// A connection of anyone else is answered 403 and closed before a byte of it is read.
type sessionListener struct {
	net.Listener
	group string // the session's cgroup directory: its runs' groups are below it
}

func (l sessionListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ok, why := heldBy(c, l.group)
		if ok {
			return c, nil
		}
		msg := "this OTLP receiver is another session's: " + why + "\n"
		_ = c.SetWriteDeadline(time.Now().Add(time.Second))
		_, _ = fmt.Fprintf(c, "HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s", len(msg), msg)
		_ = c.Close()
	}
}

// heldBy reports whether the peer socket of c (a TCP connection on this machine, in this
// namespace) is held by a process of the cgroup tree at group, or says why not.
func heldBy(c net.Conn, group string) (bool, string) {
	peer, ok1 := c.RemoteAddr().(*net.TCPAddr)
	local, ok2 := c.LocalAddr().(*net.TCPAddr)
	if !ok1 || !ok2 {
		return false, "not a TCP connection"
	}
	inode, err := socketInode(peer.Port, local.Port)
	if err != nil {
		return false, err.Error()
	}
	target := fmt.Sprintf("socket:[%d]", inode)
	pids, err := groupPids(group)
	if err != nil {
		return false, err.Error()
	}
	for _, pid := range pids {
		dir := "/proc/" + pid + "/fd"
		fds, _ := os.ReadDir(dir)
		for _, fd := range fds {
			if l, err := os.Readlink(dir + "/" + fd.Name()); err == nil && l == target {
				return true, ""
			}
		}
	}
	return false, "the connecting process is not one of the session's runs"
}

// socketInode finds, in this namespace's TCP tables, the inode of the socket whose local port
// is from and remote port to (a client's end of a loopback connection).
func socketInode(from, to int) (uint64, error) {
	want := fmt.Sprintf(":%04X", from)
	peer := fmt.Sprintf(":%04X", to)
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(table)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) < 10 || !strings.HasSuffix(f[1], want) || !strings.HasSuffix(f[2], peer) {
				continue
			}
			return strconv.ParseUint(f[9], 10, 64)
		}
	}
	return 0, errors.New("the connection's other end is not a socket of this machine")
}

// groupPids lists the processes of the cgroup tree at dir.
func groupPids(dir string) ([]string, error) {
	var pids []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == dir {
				return err
			}
			return nil // a run's group gone meanwhile
		}
		if !d.IsDir() {
			return nil
		}
		b, err := os.ReadFile(filepath.Join(p, "cgroup.procs"))
		if err == nil {
			pids = append(pids, strings.Fields(string(b))...)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("the session's cgroup %s: %w", dir, err)
	}
	return pids, nil
}
