package instance

import (
	"testing"

	"golang.org/x/sys/unix"
)

// Where close_range(2) is refused (a kernel before 5.11, a seccomp profile), the descriptors the
// instance daemon inherited are still marked close-on-exec, one by one, instead of passing
// silently into every terminal's program.
func TestInheritedDescriptorsAreCloseOnExecWithoutCloseRange(t *testing.T) {
	var p [2]int
	if err := unix.Pipe2(p[:], 0); err != nil { // inherited: not close-on-exec
		t.Fatal(err)
	}
	defer unix.Close(p[0])
	defer unix.Close(p[1])
	saved := closeRange
	closeRange = func(uint, uint, uint) error { return unix.ENOSYS }
	defer func() { closeRange = saved }()
	if err := inheritedCloseOnExec(); err != nil {
		t.Fatal(err)
	}
	for _, fd := range p {
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		if err != nil {
			t.Fatal(err)
		}
		if flags&unix.FD_CLOEXEC == 0 {
			t.Errorf("inherited descriptor %d is not close-on-exec after close_range failed", fd)
		}
	}
}
