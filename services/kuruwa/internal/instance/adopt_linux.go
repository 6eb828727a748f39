// Package instance is Kuruwa's instance daemon: it runs inside the final environment that a
// sandbox definition's trusted init built, adopts the listener the main daemon bound outside,
// and spawns the terminal processes, which inherit that environment and nothing of Kuruwa's.
package instance

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Environment variables through which the main daemon hands the instance daemon its descriptors.
const (
	EnvListenFD = "KURUWA_LISTEN_FD"
	EnvStateFD  = "KURUWA_STATE_FD"
)

// Adopted is what the instance daemon took over from its creator.
type Adopted struct {
	Listener net.Listener
	State    *os.File // directory for transcripts, opened outside
}

// Adopt takes over the inherited listener and state directory: it checks the listener is a
// listening Unix stream socket, makes both close-on-exec, unsets every variable that named them
// (and any LISTEN_*), and marks every other inherited descriptor close-on-exec, so no terminal
// process can find them.
func Adopt() (*Adopted, error) {
	lfd, err := envFD(EnvListenFD)
	if err != nil {
		return nil, err
	}
	sfd, err := envFD(EnvStateFD)
	if err != nil {
		return nil, err
	}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "LISTEN_") || strings.HasPrefix(k, "KURUWA_") || k == "NOTIFY_SOCKET" {
			_ = os.Unsetenv(k)
		}
	}
	if err := checkListener(lfd); err != nil {
		return nil, err
	}
	unix.CloseOnExec(lfd)
	unix.CloseOnExec(sfd)
	// Everything else this process inherited is no business of the terminals either.
	if err := inheritedCloseOnExec(); err != nil {
		return nil, err
	}
	lf := os.NewFile(uintptr(lfd), "kuruwa-listener")
	ln, err := net.FileListener(lf)
	_ = lf.Close() // FileListener holds its own close-on-exec duplicate
	if err != nil {
		return nil, fmt.Errorf("adopt listener fd %d: %w", lfd, err)
	}
	return &Adopted{Listener: ln, State: os.NewFile(uintptr(sfd), "kuruwa-state")}, nil
}

// closeRange is close_range(2), which a test replaces with one that fails as an older kernel's
// (before 5.11) or a seccomp profile's does.
var closeRange = unix.CloseRange

// inheritedCloseOnExec marks every descriptor from 3 up close-on-exec: with one close_range(2)
// where it works, else one by one from /proc/self/fd. A descriptor left open on exec would reach
// every terminal's program, so failing both is an error, not a warning.
func inheritedCloseOnExec() error {
	if closeRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC) == nil {
		return nil
	}
	dir, err := os.Open("/proc/self/fd")
	if err != nil {
		return fmt.Errorf("mark inherited descriptors close-on-exec: close_range failed and %w", err)
	}
	defer dir.Close()
	names, err := dir.Readdirnames(-1)
	if err != nil {
		return fmt.Errorf("mark inherited descriptors close-on-exec: close_range failed and /proc/self/fd: %w", err)
	}
	for _, n := range names {
		fd, err := strconv.Atoi(n)
		if err != nil || fd < 3 || fd == int(dir.Fd()) {
			continue
		}
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC); err != nil && err != unix.EBADF {
			return fmt.Errorf("mark inherited descriptor %d close-on-exec: %w", fd, err)
		}
	}
	return nil
}

func envFD(name string) (int, error) {
	v := os.Getenv(name)
	fd, err := strconv.Atoi(v)
	if err != nil || fd < 3 {
		return 0, fmt.Errorf("%s=%q: must name an inherited descriptor (3 or more); the instance daemon is started by the main daemon, not by hand", name, v)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil {
		return 0, fmt.Errorf("%s=%d: descriptor is not open: %w", name, fd, err)
	}
	return fd, nil
}

func checkListener(fd int) error {
	typ, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE)
	if err != nil {
		return fmt.Errorf("%s=%d: not a socket: %w", EnvListenFD, fd, err)
	}
	dom, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_DOMAIN)
	if err != nil {
		return fmt.Errorf("%s=%d: %w", EnvListenFD, fd, err)
	}
	acc, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ACCEPTCONN)
	if err != nil {
		return fmt.Errorf("%s=%d: %w", EnvListenFD, fd, err)
	}
	if typ != unix.SOCK_STREAM || dom != unix.AF_UNIX || acc != 1 {
		return fmt.Errorf("%s=%d: must be a listening Unix stream socket (type %d, domain %d, listening %d)", EnvListenFD, fd, typ, dom, acc)
	}
	return nil
}
