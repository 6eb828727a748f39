package seccomp

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// File returns a new sealed memfd holding Program, positioned at its start, for one bwrap:
// pass it in exec.Cmd.ExtraFiles and name its number in the child after --seccomp. bwrap reads
// it to the end, and the offset is shared with the child, so each bwrap needs a File of its
// own. The caller closes it once bwrap has started.
func File() (*os.File, error) {
	prog, err := Program()
	if err != nil {
		return nil, err
	}
	fd, err := unix.MemfdCreate("allox-seccomp", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("seccomp: memfd_create: %w", err)
	}
	f := os.NewFile(uintptr(fd), "allox-seccomp")
	if err := fill(f, prog); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

func fill(f *os.File, prog []byte) error {
	if _, err := f.Write(prog); err != nil {
		return fmt.Errorf("seccomp: write memfd: %w", err)
	}
	seals := unix.F_SEAL_SEAL | unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_WRITE
	if _, err := unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, seals); err != nil {
		return fmt.Errorf("seccomp: seal memfd: %w", err)
	}
	if _, err := f.Seek(0, 0); err != nil {
		return fmt.Errorf("seccomp: rewind memfd: %w", err)
	}
	return nil
}
