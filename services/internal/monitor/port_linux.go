package monitor

import (
	"net"
	"os"

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
