package boot

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/allox-os/allox/init/internal/netconf"
	"github.com/u-root/u-root/pkg/mount"
	"golang.org/x/sys/unix"
)

// SystemPath is the PATH init uses for the tools it runs and gives to services.
const SystemPath = "/usr/sbin:/usr/bin:/sbin:/bin"

// Runner runs a tool to its end and returns its combined output (exec.Cmd.CombinedOutput, or
// the reaper's CombinedOutput once PID 1 reaps every child).
type Runner func(ctx context.Context, cmd *exec.Cmd) ([]byte, error)

// Kernel returns the Sys that really mounts, configures and formats, rooted at "/"; run runs the
// tools it needs (mkfs.btrfs).
func Kernel(run Runner) *Sys {
	return &Sys{
		Root:        "/",
		Mount:       mountFS,
		Sethostname: func(name string) error { return unix.Sethostname([]byte(name)) },
		LinkUp: func(name string) error {
			if err := netconf.NoDAD(name); err != nil { // before up: no tentative address after ready
				return err
			}
			return netconf.LinkUp(name)
		},
		AddrAdd:      netconf.AddrAdd,
		DefaultRoute: netconf.DefaultRoute,
		Mkfs:         MkfsBtrfs("/", run),
		Loop:         AttachLoop,
		LeaveRootfs:  leaveRootfs,
		StoreWait:    2 * time.Second,
	}
}

// mountFS mounts through u-root's pkg/mount, whose errors name the device, type and flags.
func mountFS(source, target, fstype string, flags uintptr, data string) error {
	_, err := mount.Mount(source, target, fstype, data, flags)
	return err
}

// LookPath finds an executable named name in the SystemPath directories under root.
func LookPath(root, name string) (string, error) {
	for _, dir := range filepath.SplitList(SystemPath) {
		p := filepath.Join(root, dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found in %s (install btrfs-progs in the image)", name, SystemPath)
}

// MkfsBtrfs returns a Sys.Mkfs that runs mkfs.btrfs from root. It never passes --force: mkfs
// refuses a device where it finds a filesystem, a second guard after Classify.
func MkfsBtrfs(root string, run Runner) func(ctx context.Context, dev, label string, mixed bool) error {
	return func(ctx context.Context, dev, label string, mixed bool) error {
		bin, err := LookPath(root, "mkfs.btrfs")
		if err != nil {
			return err
		}
		if err := waitRandom(ctx); err != nil {
			return err
		}
		args := []string{"--nodiscard"}
		if label != "" {
			args = append(args, "--label", label)
		}
		if mixed {
			args = append(args, "--mixed")
		}
		args = append(args, dev)
		cmd := exec.Command(bin, args...)
		cmd.Env = []string{"PATH=" + SystemPath}
		if out, err := run(ctx, cmd); err != nil {
			return fmt.Errorf("%s %s: %w: %s", bin, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
		return nil
	}
}

// AttachLoop binds file to a free loop device with LOOP_CONFIGURE and keeps the device open
// until release, which sets LO_FLAGS_AUTOCLEAR: the device then detaches on its last close
// (at once if nothing mounted it, at the unmount otherwise).
func AttachLoop(file string) (string, func() error, error) {
	f, err := os.OpenFile(file, os.O_RDWR, 0)
	if err != nil {
		return "", nil, err
	}
	defer f.Close() // the loop device holds its own reference to the file
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		return "", nil, err
	}
	defer ctl.Close()
	for range 16 { // another process may take the free device between GET_FREE and CONFIGURE
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return "", nil, fmt.Errorf("LOOP_CTL_GET_FREE: %w", err)
		}
		dev := fmt.Sprintf("/dev/loop%d", n)
		l, err := os.OpenFile(dev, os.O_RDWR, 0)
		if err != nil {
			return "", nil, err
		}
		cfg := unix.LoopConfig{Fd: uint32(f.Fd())}
		copy(cfg.Info.File_name[:], file)
		err = unix.IoctlLoopConfigure(int(l.Fd()), &cfg)
		if errors.Is(err, unix.EBUSY) {
			l.Close()
			continue
		}
		if err != nil {
			l.Close()
			return "", nil, fmt.Errorf("LOOP_CONFIGURE %s: %w", dev, err)
		}
		return dev, func() error { return autoclear(l) }, nil
	}
	return "", nil, errors.New("no free loop device after 16 tries")
}

func autoclear(l *os.File) error {
	defer l.Close()
	info, err := unix.IoctlLoopGetStatus64(int(l.Fd()))
	if err != nil {
		return err
	}
	info.Flags |= unix.LO_FLAGS_AUTOCLEAR
	return unix.IoctlLoopSetStatus64(int(l.Fd()), info)
}

// leaveRootfs makes / a mount of its own when it is the kernel's initial rootfs (ramfs or tmpfs,
// the initramfs): / is bound recursively onto /.allox-root, which is then moved onto / and made the
// root. The initramfs contents stay where they are; nothing is copied.
func leaveRootfs() (bool, error) {
	var st unix.Statfs_t
	if err := unix.Statfs("/", &st); err != nil {
		return false, err
	}
	if st.Type != unix.RAMFS_MAGIC && st.Type != unix.TMPFS_MAGIC {
		return false, nil
	}
	const tmp = "/.allox-root"
	if err := os.Mkdir(tmp, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return false, err
	}
	steps := []struct {
		what string
		fn   func() error
	}{
		{"bind / on " + tmp, func() error { return unix.Mount("/", tmp, "", unix.MS_BIND|unix.MS_REC, "") }},
		{"chdir " + tmp, func() error { return unix.Chdir(tmp) }},
		{"move " + tmp + " onto /", func() error { return unix.Mount(".", "/", "", unix.MS_MOVE, "") }},
		{"chroot", func() error { return unix.Chroot(".") }},
		{"chdir /", func() error { return unix.Chdir("/") }},
	}
	for _, s := range steps {
		if err := s.fn(); err != nil {
			return false, fmt.Errorf("%s: %w", s.what, err)
		}
	}
	_ = os.Remove(tmp) // the now empty mount point, seen through the new root
	return true, nil
}

// waitRandom returns once the kernel's random number generator is seeded. mkfs.btrfs takes its
// UUIDs from libuuid, which polls getrandom(GRND_NONBLOCK) for up to a second per UUID while it
// is not (a VM without virtio-rng, early in its first boot) and then settles for /dev/urandom:
// five seconds of a TCG boot. A blocking getrandom makes the kernel seed it from its own timer
// jitter after at most a second; with virtio-rng (as Kata attaches) it returns at once. After
// randomWait it gives up waiting and lets mkfs.btrfs fall back as it would (a kernel that cannot
// seed itself must not stop the boot).
func waitRandom(ctx context.Context) error {
	done := make(chan error, 1)
	go func() {
		var b [1]byte
		for {
			_, err := unix.Getrandom(b[:], 0)
			if !errors.Is(err, unix.EINTR) {
				done <- err
				return
			}
		}
	}()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("wait for the kernel's random number generator: %w", err)
		}
		return nil
	case <-time.After(randomWait):
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

const randomWait = 3 * time.Second
