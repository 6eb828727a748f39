// Package memfd makes sealed in-memory files: data a child process is handed by descriptor (a
// program to run, bwrap's options, a seccomp filter) and that nobody can change once it is
// written, not even whoever holds a writable descriptor to it.
package memfd

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Sealed returns a close-on-exec memfd named name holding data, sealed against every write,
// resize and further sealing, with its offset at the start. A child that inherits it shares the
// offset: give each reader a file of its own.
func Sealed(name string, data []byte) (*os.File, error) {
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("memfd %s: %w", name, err)
	}
	f := os.NewFile(uintptr(fd), name)
	_, err = f.Write(data)
	if err == nil {
		_, err = unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, unix.F_SEAL_SEAL|unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_WRITE)
	}
	if err == nil {
		_, err = f.Seek(0, 0)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("memfd %s: %w", name, err)
	}
	return f, nil
}
