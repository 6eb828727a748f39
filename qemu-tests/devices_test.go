package qemutests

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/allox-os/allox/internal/artifact"
	"github.com/allox-os/allox/internal/baseline"
	"github.com/allox-os/allox/internal/vm"
)

// deviceInit reports what the guest sees of the harness's devices, then answers one TCP
// connection on port 8093 with "PONG <line>" and powers off.
const deviceInit = `#!/bin/busybox sh
bb=/bin/busybox
$bb mount -t devtmpfs devtmpfs /dev
exec </dev/console >/dev/console 2>&1
$bb mount -t proc proc /proc
$bb mount -t sysfs sysfs /sys
for d in vda vdb; do
  echo "HARNESS-DISK $d serial=$($bb cat /sys/block/$d/serial) ro=$($bb cat /sys/block/$d/ro)"
done
echo "HARNESS-FWCFG $($bb cat /sys/firmware/qemu_fw_cfg/by_name/opt/allox/harness/raw)"
echo "HARNESS-CMDLINE $($bb cat /proc/cmdline)"
$bb ip link set lo up
$bb ip link set eth0 up
$bb ip addr add 10.0.2.15/24 dev eth0
printf '#!/bin/busybox sh\nread l\necho "PONG $l"\n' > /pong
$bb chmod 755 /pong
$bb nc -l -p 8093 -e /pong &
until $bb netstat -ltn | $bb grep -q ':8093 '; do $bb sleep 0.1; done
echo HARNESS-LISTENING
wait
$bb poweroff -f
`

// TestHarnessDevices boots the appliance's kernel with a busybox init that reports the devices the
// harness attached: disk order and serials, read-only, fw_cfg, the console, and the 127.0.0.1
// forward. When an appliance boot fails, this test tells a harness problem from a guest one.
func TestHarnessDevices(t *testing.T) {
	dir := t.TempDir()
	kernel, initrd := busyboxBoot(t, dir, "devices.cpio", deviceInit)
	disks := []vm.Disk{{Path: filepath.Join(dir, "a.img"), Serial: "harness-first", ReadOnly: true},
		{Path: filepath.Join(dir, "b.img"), Serial: "harness-second"}}
	for _, d := range disks {
		if err := os.WriteFile(d.Path, make([]byte, 1<<20), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	token := newToken(t)
	ctx := testContext(t, 60*time.Second)
	v, err := vm.Start(ctx, t, vm.Options{
		Kernel: kernel, Initrd: initrd, Cmdline: []string{"panic=-1", "no_timer_check"}, Disks: disks, // as Kata: TCG on a loaded machine can fail the IO-APIC timer check
		FwCfg: map[string]string{"opt/allox/harness": token}, HostFwd: map[int]int{8093: 0},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"HARNESS-DISK vda serial=harness-first ro=1",
		"HARNESS-DISK vdb serial=harness-second ro=0",
		"HARNESS-FWCFG " + token,
		"HARNESS-LISTENING",
	} {
		if _, err := v.WaitFor(ctx, want); err != nil {
			t.Fatal(err)
		}
	}
	if l, _ := v.WaitFor(ctx, "HARNESS-CMDLINE"); !strings.HasSuffix(l, " console=ttyS0") {
		t.Errorf("kernel command line %q: want console=ttyS0 added last", l)
	}
	if got, err := pingForwarded(v.HostPort(8093)); err != nil || got != "PONG ping" {
		t.Errorf("127.0.0.1:%d → guest 8093: %q, %v; want PONG ping", v.HostPort(8093), got, err)
	}
	if err := v.Wait(); err != nil {
		t.Fatal(err)
	}
}

func pingForwarded(port int) (string, error) {
	c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 10*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(vm.Scaled(10 * time.Second)))
	if _, err := fmt.Fprintln(c, "ping"); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line), err
}

// busyboxBoot is the built appliance kernel and an initramfs in dir (named name) whose /init is
// busybox running script: for the tests that check the kernel or the harness, not the appliance.
func busyboxBoot(t *testing.T, dir, name, script string) (kernel, initrd string) {
	t.Helper()
	needQEMU(t)
	kernel = filepath.Join(outDir(), artifact.Kernel)
	if _, err := os.Stat(kernel); err != nil {
		unavailable(t, "artifacts missing in %s (no %s): run `make image` (or `make test`)", outDir(), artifact.Kernel)
	}
	if _, err := os.Stat(baseline.Busybox); err != nil {
		unavailable(t, "%s missing: apt-get install busybox-static", baseline.Busybox)
	}
	initrd = filepath.Join(dir, name)
	f, err := os.Create(initrd)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := baseline.WriteBusyboxInitramfs(f, baseline.Busybox, script); err != nil {
		t.Fatal(err)
	}
	return kernel, initrd
}
