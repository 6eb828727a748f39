// Command init is the Allox OS PID 1: /sbin/init in the rootfs image, /init in the initramfs.
// It runs the boot steps, supervises the manifest's services (and a kata-agent), reaps every
// process and, on a signal, a failed step or the end of a critical service, takes the machine
// down in order and powers it off.
//
// Anywhere but PID 1 it refuses to run, unless ALLOX_INIT_TEST_ROOT names a directory: then it
// boots "dry" against that directory (no mounts, no network, no disk, no kill(-1), no reboot),
// runs the services of <dir>/etc/allox/manifest.json for real, and exits where it would power off.
package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"

	"github.com/allox-os/allox/init/internal/boot"
	"github.com/allox-os/allox/init/internal/console"
	"github.com/allox-os/allox/init/internal/shutdown"
	"github.com/allox-os/allox/init/internal/supervise"
	"golang.org/x/sys/unix"
)

// testRootEnv names the directory of a dry run outside a VM.
const testRootEnv = "ALLOX_INIT_TEST_ROOT"

func main() {
	if _, err := supervise.Trampoline(os.Args); err != nil { // only returns when it failed
		fmt.Fprintln(os.Stderr, "allox init:", err)
		os.Exit(127)
	}
	a, err := newApp(os.Getpid(), os.Getenv(testRootEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, "allox init:", err)
		os.Exit(2)
	}
	defer func() {
		if r := recover(); r != nil { // PID 1 must not die: go down in order instead
			a.handle(fmt.Errorf("BUG: panic: %v", r))
		}
	}()
	a.handle(a.run())
}

var errNotPID1 = errors.New("refusing to run: this is the guest's PID 1 (/sbin/init); it mounts " +
	"filesystems and powers the machine off. To try it outside a VM, set " + testRootEnv +
	" to a directory holding etc/allox/manifest.json")

// newApp wires init to the kernel (as PID 1) or to a dry root directory (a test run).
func newApp(pid int, testRoot string) (*app, error) {
	pid1 := pid == 1
	if !pid1 && testRoot == "" {
		return nil, fmt.Errorf("pid %d: %w", pid, errNotPID1)
	}
	a := &app{pid1: pid1, sigs: make(chan os.Signal, 8), level: new(slog.LevelVar), reaper: supervise.NewReaper()}
	signal.Notify(a.sigs, shutdown.Signals...) // first of all: see shutdown.Signals
	if pid1 {
		// The store's mkfs.btrfs runs while the reaper reaps (the kata-agent starts first).
		a.sys = boot.Kernel(a.reaper.CombinedOutput)
		a.killAll = func(sig unix.Signal) error { return unix.Kill(-1, sig) }
		a.unmount = unix.Unmount
		a.reboot = unix.Reboot
	} else {
		a.sys = boot.Dry(testRoot)
		a.exit = os.Exit
	}
	a.sync = unix.Sync
	a.console = console.Open(a.sys.Path(console.Path), os.Stderr)
	h := slog.NewTextHandler(a.console, &slog.HandlerOptions{Level: a.level})
	a.log = slog.New(h).With("component", "init")
	a.sys.Notify = a.notice
	return a, a.become()
}

// become makes ctrl-alt-del a SIGINT to PID 1, or makes a test run the reaper of its subtree.
func (a *app) become() error {
	if a.pid1 {
		if err := unix.Reboot(unix.LINUX_REBOOT_CMD_CAD_OFF); err != nil {
			a.log.Warn("ctrl-alt-del stays a hard reboot", "err", err)
		}
		return nil
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("PR_SET_CHILD_SUBREAPER: %w", err)
	}
	return nil
}
