package qemutests

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/allox-os/allox/internal/marker"
	"github.com/allox-os/allox/internal/rpc"
	"github.com/allox-os/allox/kernel"
)

// bootBudget is what one boot, its checks and its power-off may take on KVM; TCG gets
// vm.TimeoutScale() times as much. The TCG boot of the Debian baseline takes about 15 s here.
const bootBudget = 90 * time.Second

func TestBootImageMode(t *testing.T) { bootAndCheck(t, imageMode) }

// The workspace disk is /dev/vda in initrd mode: there is no rootfs disk.
func TestBootInitrdMode(t *testing.T) { bootAndCheck(t, initrdMode) }

// bootAndCheck boots the appliance in mode m on a blank workspace disk and checks what the spine
// promises: readiness, system.info, every requested kernel option live, the token, a clean power-off.
func bootAndCheck(t *testing.T, m mode) {
	a := needAppliance(t, m)
	ctx := testContext(t, bootBudget)
	b := a.boot(ctx, t, m, blankDisk(t))
	ready := b.waitReady(ctx, t)
	t.Logf("%s mode ready %.3fs after QEMU start", m, ready.At.Seconds())
	b.checkSystemInfo(ctx, t)
	b.checkKernelConfig(ctx, t)
	b.checkTokenRequired(ctx, t)
	b.powerOff(ctx, t)
}

// TestStoreReusedAcrossBoots boots on a blank store disk, then again on the disk the first boot
// formatted, in both boot modes.
func TestStoreReusedAcrossBoots(t *testing.T) {
	for _, m := range []mode{imageMode, initrdMode} {
		t.Run(m.String(), func(t *testing.T) { storeReusedAcrossBoots(t, m) })
	}
}

func storeReusedAcrossBoots(t *testing.T, m mode) {
	a := needAppliance(t, m)
	needTool(t, "blkid", "apt-get install util-linux")
	ctx := testContext(t, 2*bootBudget)
	disk := blankDisk(t)

	first := a.boot(ctx, t, m, disk)
	first.waitReady(ctx, t)
	info1 := first.checkSystemInfo(ctx, t)
	first.powerOff(ctx, t)
	fs1 := diskFilesystem(t, disk)
	if fs1.Type != "btrfs" || fs1.UUID == "" {
		t.Fatalf("workspace disk after the first boot: %+v; want a whole-disk btrfs with a UUID", fs1)
	}
	writeCanary(t, disk)

	second := a.boot(ctx, t, m, disk)
	second.waitReady(ctx, t)
	info2 := second.checkSystemInfo(ctx, t)
	if second.consoleHas(marker.StoreFallback) {
		t.Errorf("second boot fell back to a RAM store although the workspace disk was attached")
	}
	second.powerOff(ctx, t)
	if info1.BootID == "" || info1.BootID == info2.BootID {
		t.Errorf("boot_id %q then %q: want two different, non-empty ids", info1.BootID, info2.BootID)
	}
	if fs2 := diskFilesystem(t, disk); fs2 != fs1 {
		t.Errorf("workspace filesystem %+v became %+v: the second boot reformatted the store", fs1, fs2)
	}
	checkCanary(t, disk)
}

// TestStoreFormattedOnHost boots on a disk the host formatted with its own mkfs.btrfs, as the
// README tells a platform team that wants the first boot's format off the guest: the guest takes
// it as it is (the canary before the filesystem survives, the UUID stays), and a session in it runs.
func TestStoreFormattedOnHost(t *testing.T) {
	a := needAppliance(t, imageMode)
	needTool(t, "mkfs.btrfs", "apt-get install btrfs-progs")
	needTool(t, "blkid", "apt-get install util-linux")
	ctx := testContext(t, bootBudget)
	disk := blankDisk(t)
	if out, err := exec.Command("mkfs.btrfs", "-q", "--nodiscard", "-L", "allox-ws", disk).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.btrfs on the host: %v\n%s", err, out)
	}
	fs := diskFilesystem(t, disk)
	writeCanary(t, disk)
	b := a.boot(ctx, t, imageMode, disk)
	b.waitReady(ctx, t)
	b.checkSystemInfo(ctx, t)
	if got := b.runInGuest(ctx, t, "echo kept > f && cat f"); got != "kept\n" {
		t.Errorf("a run in the host-formatted store printed %q, want \"kept\\n\"", got)
	}
	b.powerOff(ctx, t)
	if got := diskFilesystem(t, disk); got != fs {
		t.Errorf("workspace filesystem %+v became %+v: the guest reformatted a host-formatted store", fs, got)
	}
	checkCanary(t, disk)
}

func TestStoreFallbackWithoutDisk(t *testing.T) {
	a := needAppliance(t, initrdMode)
	ctx := testContext(t, bootBudget)
	b := a.boot(ctx, t, initrdMode, "")
	if _, err := b.WaitFor(ctx, marker.StoreFallback); err != nil {
		t.Fatal(err)
	}
	b.waitReady(ctx, t)
	b.checkSystemInfo(ctx, t) // still btrfs, now RAM-backed
	b.powerOff(ctx, t)
}

func (b *booted) checkSystemInfo(ctx context.Context, t *testing.T) rpc.SystemInfo {
	t.Helper()
	var info rpc.SystemInfo
	if err := b.rpc.Call(ctx, rpc.ActionSystemInfo, nil, &info); err != nil {
		t.Fatal(err)
	}
	if j, err := json.Marshal(info); err == nil {
		t.Logf("system.info: %s", j)
	}
	if !strings.Contains(info.Kernel.Release, "allox") {
		t.Errorf("kernel.release %q lacks \"allox\" (CONFIG_LOCALVERSION)", info.Kernel.Release)
	}
	if info.Store.FSType != "btrfs" || info.Store.Root == "" {
		t.Errorf("store %+v: want fstype btrfs and a root", info.Store)
	}
	if info.Cgroup.Version != 2 {
		t.Errorf("cgroup.version %d; want 2", info.Cgroup.Version)
	}
	for _, c := range []string{"cpu", "memory", "pids"} {
		if !slices.Contains(info.Cgroup.Controllers, c) {
			t.Errorf("cgroup.controllers %q lacks %s", info.Cgroup.Controllers, c)
		}
	}
	return info
}

// checkKernelConfig proves every symbol kernel/fragments requests is live in the running kernel,
// with the same fragment parser and proof mkimage ran on the build side (no allow-list: in the guest
// nothing may be missing).
func (b *booted) checkKernelConfig(ctx context.Context, t *testing.T) {
	t.Helper()
	frags, err := filepath.Glob(filepath.Join("..", "kernel", "fragments", "*.conf"))
	if err != nil || len(frags) == 0 {
		t.Fatalf("no kernel fragments in ../kernel/fragments (%v)", err)
	}
	reqs, err := kernel.MergeFragments(frags)
	if err != nil {
		t.Fatal(err)
	}
	var res rpc.KernelConfig
	if err := b.rpc.Call(ctx, rpc.ActionSystemKernelConfig, nil, &res); err != nil {
		t.Fatal(err)
	}
	live, err := kernel.ParseConfig(strings.NewReader(res.Config), "/proc/config.gz")
	if err != nil {
		t.Fatalf("system.kernel_config: %v", err)
	}
	if err := kernel.Prove(reqs, kernel.ConfigOf(live), nil, nil); err != nil {
		t.Errorf("the running kernel lacks requested options:\n%v", err)
	}
}

// checkTokenRequired checks that the host listener refuses a call without or with a wrong token.
func (b *booted) checkTokenRequired(ctx context.Context, t *testing.T) {
	t.Helper()
	for _, token := range []string{"", "wrong-" + b.token} {
		err := newRPCClient(b.url, token).Call(ctx, rpc.ActionSystemInfo, nil, nil)
		var rerr *rpc.Error
		if !errors.As(err, &rerr) || !errors.Is(err, rpc.CodeUnauthorized) {
			t.Errorf("system.info with token %q: %v; want an RPC error %s", token, err, rpc.CodeUnauthorized)
		}
	}
	// Attack: any user of the host reads QEMU's command line for the token. It is not there (the
	// harness hands fw_cfg values to QEMU in 0600 files).
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", b.Pid()))
	if err != nil || len(cmdline) == 0 || bytes.Contains(cmdline, []byte(b.token)) {
		t.Errorf("QEMU's /proc/PID/cmdline (%v) holds the appliance's token, or could not be read", err)
	}
}
