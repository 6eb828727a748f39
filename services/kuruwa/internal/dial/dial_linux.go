// Package dial is the client's side of Kuruwa's entries without the net package, which the CLI
// then neither links nor initialises on each call: a blocking socket for a call that makes one
// request, an *os.File on the runtime's poller for a stream.
package dial

import (
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// Check refuses an entry path whose last component is not a socket (a symlink, another file),
// so a client is not redirected to another daemon.
func Check(path string) error {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return fmt.Errorf("entry %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return fmt.Errorf("entry %s: not a socket (a symlink or another file); give the socket's real path", path)
	}
	return nil
}

func connect(path string) (int, error) {
	if err := Check(path); err != nil {
		return -1, err
	}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("entry %s: socket: %w", path, err)
	}
	for {
		err = unix.Connect(fd, &unix.SockaddrUnix{Name: path})
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("entry %s: connect: %w", path, err)
	}
	return fd, nil
}

// Stream connects to the entry at path for a stream (tail, attach): a non-blocking socket as an
// *os.File, so that reads wait on the runtime's poller, deadlines work and Close ends a read
// in progress.
func Stream(path string) (*os.File, error) {
	fd, err := connect(path)
	if err != nil {
		return nil, err
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("entry %s: %w", path, err)
	}
	return os.NewFile(uintptr(fd), path), nil
}

// Socket is a blocking connection read and written with plain system calls: what a CLI call that
// makes one request uses, so that it sets up neither the runtime's poller nor its goroutines.
type Socket int

// Blocking connects to the entry at path as a blocking Socket.
func Blocking(path string) (Socket, error) {
	fd, err := connect(path)
	return Socket(fd), err
}

func (s Socket) Read(p []byte) (int, error) {
	for {
		n, err := unix.Read(int(s), p)
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return 0, err
		case n == 0 && len(p) > 0:
			return 0, io.EOF
		}
		return n, nil
	}
}

func (s Socket) Write(p []byte) (int, error) {
	done := 0
	for done < len(p) {
		n, err := unix.Write(int(s), p[done:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return done, err
		}
		done += n
	}
	return done, nil
}

// Close closes the connection.
func (s Socket) Close() error { return unix.Close(int(s)) }
