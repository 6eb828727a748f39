package probe

import (
	"bufio"
	"os"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/allox-os/allox/deploy/probe/internal/wire"
)

// Capabilities is the Capability Reporter: what this host can do, read from the host itself.
// Appliance plugins are added as sandboxes report them (system.info).
func Capabilities(runtimes []string, channels []string) wire.Capabilities {
	c := wire.Capabilities{Runtimes: runtimes, Channels: channels}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		c.Kernel = unix.ByteSliceToString(u.Release[:])
	}
	c.Accel, c.AccelReason = accel()
	fsys := filesystems()
	for _, f := range []string{"btrfs", "cgroup2", "overlay", "erofs", "virtiofs"} {
		if slices.Contains(fsys, f) {
			c.Features = append(c.Features, f)
		}
	}
	for _, d := range []struct{ path, feature string }{{"/dev/vhost-vsock", "vhost_vsock"}, {"/dev/vhost-net", "vhost_net"}, {"/dev/net/tun", "tun"}} {
		if _, err := os.Stat(d.path); err == nil {
			c.Features = append(c.Features, d.feature)
		}
	}
	return c
}

// accel is kvm when /dev/kvm opens read-write and answers KVM_GET_API_VERSION, else tcg.
func accel() (string, string) {
	fd, err := unix.Open("/dev/kvm", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return "tcg", "/dev/kvm: " + err.Error()
	}
	defer unix.Close(fd)
	const kvmGetAPIVersion = 0xAE00
	if v, err := unix.IoctlRetInt(fd, kvmGetAPIVersion); err != nil || v != 12 {
		return "tcg", "/dev/kvm does not answer KVM_GET_API_VERSION with 12"
	}
	return "kvm", ""
}

func filesystems() []string {
	f, err := os.Open("/proc/filesystems")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 0 {
			out = append(out, fields[len(fields)-1])
		}
	}
	return out
}
