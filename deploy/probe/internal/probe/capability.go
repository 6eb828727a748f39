package probe

import (
	"bufio"
	"os"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/allox-os/allox/deploy/probe/internal/wire"
	"github.com/allox-os/allox/internal/vm"
)

// Capabilities is the Capability Reporter: what this host can do, read from the host itself.
// Appliance plugins are added as sandboxes report them (system.info).
func Capabilities(runtimes []string, channels []string) wire.Capabilities {
	c := wire.Capabilities{Runtimes: runtimes, Channels: channels}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		c.Kernel = unix.ByteSliceToString(u.Release[:])
	}
	c.Accel, c.AccelReason = vm.Accel(), vm.AccelReason() // what the QEMU runtime will use
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
