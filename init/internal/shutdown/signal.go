// Package shutdown takes the guest down in order: services in reverse start order, every other
// process, a bounded sync, unmounts in reverse mount order; and it maps PID 1's signals to the
// power-off or reboot they request.
package shutdown

import (
	"os"

	"golang.org/x/sys/unix"
)

// Action is how the machine goes down.
type Action int

const (
	PowerOff Action = iota
	Reboot
)

func (a Action) String() string {
	if a == Reboot {
		return "reboot"
	}
	return "poweroff"
}

// Cmd is the reboot(2) command for the action.
func (a Action) Cmd() int {
	if a == Reboot {
		return unix.LINUX_REBOOT_CMD_RESTART
	}
	return unix.LINUX_REBOOT_CMD_POWER_OFF
}

// Signals are the signals PID 1 must subscribe to. Go installs a handler for each of them at
// start-up, and when one arrives from a process without a subscriber the runtime exits or
// crashes: for PID 1 that is a kernel panic. Subscribing also keeps their default disposition
// for services (an ignored signal would stay ignored across exec).
var Signals = []os.Signal{
	unix.SIGHUP, unix.SIGINT, unix.SIGQUIT, unix.SIGILL, unix.SIGTRAP, unix.SIGABRT, unix.SIGBUS,
	unix.SIGFPE, unix.SIGUSR1, unix.SIGSEGV, unix.SIGUSR2, unix.SIGPIPE, unix.SIGALRM, unix.SIGTERM,
	unix.SIGSTKFLT, unix.SIGXCPU, unix.SIGXFSZ, unix.SIGVTALRM, unix.SIGPROF, unix.SIGIO,
	unix.SIGPWR, unix.SIGSYS,
}

// ForSignal says what a signal to PID 1 requests; ok is false for signals init ignores.
//
//   - SIGTERM, SIGUSR2 (busybox poweroff), SIGUSR1 (busybox halt) and SIGPWR power off. A VM
//     that halts without powering off would hang its Kata runtime, so halt powers off too, and
//     SIGTERM (busybox reboot) powers off as well: an appliance VM is restarted by its host.
//   - SIGINT (ctrl-alt-del, which the kernel forwards once init has set CAD off) reboots.
func ForSignal(sig os.Signal) (a Action, ok bool) {
	switch sig {
	case unix.SIGTERM, unix.SIGUSR2, unix.SIGUSR1, unix.SIGPWR:
		return PowerOff, true
	case unix.SIGINT:
		return Reboot, true
	}
	return PowerOff, false
}
