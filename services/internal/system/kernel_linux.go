package system

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// cgroup2Magic is CGROUP2_SUPER_MAGIC.
const cgroup2Magic = unix.CGROUP2_SUPER_MAGIC

func uname() (Kernel, error) {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return Kernel{}, err
	}
	return Kernel{
		Release: unix.ByteSliceToString(u.Release[:]),
		Version: unix.ByteSliceToString(u.Version[:]),
		Machine: unix.ByteSliceToString(u.Machine[:]),
	}, nil
}

func statfs(path string) (uint32, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0, &os.PathError{Op: "statfs", Path: path, Err: err}
	}
	return uint32(st.Type), nil // magics are 32-bit; Type is signed and wider on some arches
}

func getppid() int { return unix.Getppid() }

// signalInit asks PID 1 to power the guest off: the Allox init treats SIGTERM as "power off".
func signalInit() error {
	if err := unix.Kill(1, unix.SIGTERM); err != nil {
		return fmt.Errorf("signal init: %w", err)
	}
	return nil
}
