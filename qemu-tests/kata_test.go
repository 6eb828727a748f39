package qemutests

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"

	"github.com/allox-os/allox/deploy/kata"
	"github.com/allox-os/allox/internal/artifact"
	"github.com/allox-os/allox/internal/rpc"
	"github.com/allox-os/allox/internal/vm"
)

// These tests boot the real image the way Kata's Go runtime starts it on x86_64 q35: Kata's kernel
// command line (kata.KernelParams from the Go drop-in mkimage wrote, over the shipped
// configuration-qemu.toml defaults), the console on a virtio-serial virtconsole (hvc0), memory with
// hotplug slots and maxmem, Kata's CPU topology, RTC, RNG and NUMA memory backend, and the image
// over Kata's virtio-blk form or as an NVDIMM. What TCG or this host cannot do is left out: accel=kvm
// and -cpu host (TCG runs -cpu max,pmu=off), vhost-vsock (no /dev/vhost-vsock) and so the agent's
// channel, virtio-fs, the tap network, the QMP socket and pidfile. The harness adds what it needs
// to drive the appliance: a workspace disk, a user-mode network forwarding the RPC port, and the
// fw_cfg token. A dm-verity build (ALLOX_OUT=out/verity) boots through Kata's dm-mod.create line
// and is checked to have /dev/dm-0 as its root.

// Kata's shipped x86_64 configuration-qemu.toml values that the drop-in leaves alone.
const (
	kataDefaultMemoryMiB = 2048 // default_memory
	kataMemorySlots      = 10   // memory_slots
	kataDefaultVCPUs     = 1    // default_vcpus
)

// dropIn is the [hypervisor.qemu] table of the Go runtime's drop-in, as Kata decodes it.
type dropIn struct {
	Kernel             string `toml:"kernel"`
	Image              string `toml:"image"`
	Initrd             string `toml:"initrd"`
	RootfsType         string `toml:"rootfs_type"`
	DisableImageNvdimm bool   `toml:"disable_image_nvdimm"`
	KernelVerityParams string `toml:"kernel_verity_params"`
	BlockDeviceDriver  string `toml:"block_device_driver"`
	KernelParams       string `toml:"kernel_params"`
	DefaultMemory      int    `toml:"default_memory"`
}

// readDropIn reads out/kata/config.d/50-allox.toml.
func readDropIn(tb testing.TB, dir string) dropIn {
	tb.Helper()
	return readDropInFile(tb, filepath.Join(dir, artifact.KataDir, filepath.FromSlash(kata.GoRuntimeDropIn)))
}

func readDropInFile(tb testing.TB, p string) dropIn {
	tb.Helper()
	var c struct {
		Hypervisor struct {
			QEMU dropIn `toml:"qemu"`
		} `toml:"hypervisor"`
	}
	if _, err := toml.DecodeFile(p, &c); err != nil {
		tb.Fatalf("Kata drop-in: %v (build the image: make image)", err)
	}
	return c.Hypervisor.QEMU
}

// kataBoot is one Kata-style boot of the built appliance.
type kataBoot struct {
	mode   mode
	nvdimm bool       // image as NVDIMM, root=/dev/pmem0p1 with dax
	agent  kata.Agent // [agent.kata] settings that put agent.* on the line
	extra  []string   // appended to the drop-in's kernel_params
}

// root is the device Kata's command line mounts as / in image mode, and whether with dax: the
// dm-verity device when the drop-in sets kernel_verity_params (Kata then passes no dax).
func (k kataBoot) root(d dropIn) (dev string, dax bool) {
	switch {
	case d.KernelVerityParams != "":
		return kata.VerityRoot, false
	case k.nvdimm:
		return kata.NvdimmData, true
	}
	return kata.VirtioBlkData, false
}

// cmdline is the command line Kata's Go runtime would pass with the drop-in d.
func (k kataBoot) cmdline(tb testing.TB, d dropIn) []string {
	tb.Helper()
	b := kata.Boot{MaxVCPUs: runtime.NumCPU(), Agent: k.agent, BlockDeviceDriver: d.BlockDeviceDriver,
		KernelParams: append(strings.Fields(d.KernelParams), k.extra...)}
	if k.mode == imageMode {
		b.Image, b.DisableImageNvdimm, b.RootfsType = true, !k.nvdimm, d.RootfsType
		b.KernelVerityParams = d.KernelVerityParams
	}
	p, err := kata.KernelParams(b)
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

// options are the QEMU options for k, Kata's machine around the harness's own devices.
func (k kataBoot) options(tb testing.TB, a *built, workspace, token string) vm.Options {
	tb.Helper()
	d := readDropIn(tb, a.dir)
	opt := vm.Options{
		Kernel: a.path(artifact.Kernel), Cmdline: k.cmdline(tb, d),
		MemoryMiB: kataDefaultMemoryMiB, CPUs: kataDefaultVCPUs, MaxCPUs: runtime.NumCPU(),
		MemSlots: kataMemorySlots, MaxMemoryMiB: hostMemoryMiB(tb),
		Console: vm.ConsoleVirtio, KataMachine: true,
		FwCfg:   map[string]string{a.info.TokenFwCfg: token},
		HostFwd: map[int]int{a.info.RPCPort: 0},
	}
	if d.DefaultMemory > 0 {
		opt.MemoryMiB = d.DefaultMemory
	}
	switch {
	case k.mode == initrdMode:
		opt.Initrd = a.path(artifact.Initramfs)
		opt.MemoryMiB = max(opt.MemoryMiB, a.info.MemoryMiB)
	case k.nvdimm:
		opt.Nvdimm = a.path(artifact.Rootfs)
	default:
		opt.Disks = []vm.Disk{{Path: a.path(artifact.Rootfs), ReadOnly: true, Kata: true, Serial: "image-" + token[:14]}}
	}
	if workspace != "" {
		opt.Disks = append(opt.Disks, vm.Disk{Path: workspace, Serial: a.info.StoreSerial})
	}
	return opt
}

// hostMemoryMiB is MemTotal: Kata's maxmem when default_maxmemory is 0.
func hostMemoryMiB(tb testing.TB) int {
	tb.Helper()
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		var kib int
		if _, err := fmt.Sscanf(s.Text(), "MemTotal: %d kB", &kib); err == nil {
			return kib >> 10
		}
	}
	tb.Fatal("/proc/meminfo has no MemTotal")
	return 0
}

// bootKata starts the appliance as Kata would.
func (a *built) bootKata(ctx context.Context, tb testing.TB, k kataBoot, workspace string) (*booted, []string) {
	tb.Helper()
	token := newToken(tb)
	opt := k.options(tb, a, workspace, token)
	v, err := vm.Start(ctx, tb, opt)
	if err != nil {
		tb.Fatalf("boot %s mode as Kata: %v", k.mode, err)
	}
	url := fmt.Sprintf("http://127.0.0.1:%d", v.HostPort(a.info.RPCPort))
	return &booted{VM: v, app: a, url: url, token: token, rpc: newRPCClient(url, token)}, opt.Cmdline
}

// TestKataImageVirtioBlk boots the image over Kata's virtio-blk form with the full Kata command
// line (disable_image_nvdimm = true: root=/dev/vda1 without dax), with the agent's debug log and
// debug console on ([agent.kata] enable_debug, debug_console_enabled) so that agent.* parameters
// are on the line for the init to ignore.
func TestKataImageVirtioBlk(t *testing.T) {
	kataBootAndCheck(t, kataBoot{mode: imageMode, agent: kata.Agent{Debug: true, DebugConsole: true}})
}

// TestKataImageNvdimm boots the image as Kata does by default on x86_64: an NVDIMM, root=/dev/pmem0p1
// mounted with dax. That needs the image's 2 MiB NVDIMM DAX header; without it the kernel panics
// ("DAX unsupported by block device"), so a build without the header fails here.
func TestKataImageNvdimm(t *testing.T) {
	a := needAppliance(t, imageMode)
	if !a.info.Nvdimm {
		t.Fatalf("%s says the image has no NVDIMM DAX header (\"nvdimm\": false or absent): Kata's default NVDIMM boot "+
			"(root=/dev/pmem0p1 rootflags=dax,...) panics without it; build the image with kata { nvdimm = true }", a.path(artifact.Boot))
	}
	kataBootAndCheck(t, kataBoot{mode: imageMode, nvdimm: true})
}

// TestKataInitrd boots the initramfs with Kata's initrd command line (no root=, no systemd.*).
func TestKataInitrd(t *testing.T) {
	kataBootAndCheck(t, kataBoot{mode: initrdMode})
}

func kataBootAndCheck(t *testing.T, k kataBoot) {
	a := needAppliance(t, k.mode)
	ctx := testContext(t, bootBudget)
	d := readDropIn(t, a.dir)
	b, cmdline := a.bootKata(ctx, t, k, blankDisk(t))
	ready := b.waitReady(ctx, t)
	t.Logf("Kata %s mode (nvdimm %v) ready %.3fs after QEMU start", k.mode, k.nvdimm, ready.At.Seconds())
	b.checkSystemInfo(ctx, t)
	// In initrd mode the root is the initramfs (init made it a mount of its own, or no sandbox
	// could pivot_root away from it): a sandboxed run reads the command line; there is no root
	// device to check.
	if k.mode == initrdMode {
		if got, want := strings.TrimSpace(b.runInGuest(ctx, t, "cat /proc/cmdline")), strings.Join(cmdline, " "); got != want {
			t.Errorf("guest /proc/cmdline:\n  %s\nwant Kata's:\n  %s", got, want)
		}
	}
	if k.mode == imageMode {
		g := b.guestView(ctx, t)
		if got, want := g.cmdline, strings.Join(cmdline, " "); got != want {
			t.Errorf("guest /proc/cmdline:\n  %s\nwant Kata's:\n  %s", got, want)
		}
		dev, dax := k.root(d)
		checkRoot(t, dev, dax, g.root)
	}
	checkInitQuiet(t, b.VM)
	b.powerOff(ctx, t)
}

// guestView is what a process in the guest reads of its boot.
type guestView struct {
	cmdline string
	// root is the image's root filesystem as the sandbox sees it: processes run in a bubblewrap
	// sandbox whose / is a tmpfs and whose /usr is bound read-only from init's /, so the root is
	// the filesystem /usr comes from.
	root guestRoot
}

type guestRoot struct {
	device  string   // name in /proc/partitions, e.g. vda1
	fstype  string   // from mountinfo
	options []string // /proc/fs/ext4/<device>/options: the superblock's, ro and dax included
}

// probeScript prints /proc/cmdline, the sandbox's mountinfo, the partitions and every ext4
// filesystem's options, separated by "---" lines.
const probeScript = `cat /proc/cmdline; echo ---; cat /proc/self/mountinfo; echo ---; cat /proc/partitions; echo ---
for d in /proc/fs/ext4/*; do [ -e "$d/options" ] && echo "${d##*/} $(tr '\n' , < "$d/options")"; done`

// guestView runs probeScript through process.start.
func (b *booted) guestView(ctx context.Context, tb testing.TB) guestView {
	tb.Helper()
	out := b.runInGuest(ctx, tb, probeScript)
	parts := strings.Split(out, "\n---\n")
	if len(parts) != 4 {
		tb.Fatalf("guest probe output has %d parts, want 4:\n%s", len(parts), out)
	}
	root, err := parseRoot(parts[1], parts[2], parts[3])
	if err != nil {
		tb.Fatalf("%v\nguest probe output:\n%s", err, out)
	}
	return guestView{cmdline: strings.TrimSpace(parts[0]), root: root}
}

// parseRoot finds the filesystem the sandbox's /usr is bound from and its device and options.
func parseRoot(mountinfo, partitions, ext4 string) (guestRoot, error) {
	var r guestRoot
	devno := ""
	for _, l := range strings.Split(mountinfo, "\n") {
		f := strings.Fields(l)
		if len(f) < 10 || f[4] != "/usr" {
			continue
		}
		for i, x := range f {
			if x == "-" && i+1 < len(f) {
				devno, r.fstype = f[2], f[i+1]
			}
		}
	}
	if devno == "" {
		return r, fmt.Errorf("no /usr mount in the sandbox's mountinfo")
	}
	for _, l := range strings.Split(partitions, "\n") {
		if f := strings.Fields(l); len(f) == 4 && f[0]+":"+f[1] == devno {
			r.device = f[3]
		}
	}
	if r.device == "" {
		return r, fmt.Errorf("device %s (the root) is not in /proc/partitions", devno)
	}
	for _, l := range strings.Split(ext4, "\n") {
		if name, opts, ok := strings.Cut(l, " "); ok && name == r.device {
			r.options = strings.Split(strings.TrimSuffix(opts, ","), ",")
		}
	}
	return r, nil
}

// runInGuest runs script with /bin/sh in a fresh session and returns its stdout.
func (b *booted) runInGuest(ctx context.Context, tb testing.TB, script string) string {
	tb.Helper()
	for _, c := range []struct {
		action string
		params map[string]any
	}{
		{rpc.ActionAgentCreate, map[string]any{"agent_id": "kata"}},
		{rpc.ActionSessionCreate, map[string]any{"agent_id": "kata", "session_id": "probe"}},
	} {
		if err := b.rpc.Call(ctx, c.action, c.params, nil); err != nil {
			tb.Fatalf("%s: %v", c.action, err)
		}
	}
	var r rpc.Run
	if err := b.rpc.Call(ctx, rpc.ActionProcessStart, map[string]any{"agent_id": "kata", "session_id": "probe",
		"argv": []string{"/bin/sh", "-c", script}}, &r); err != nil {
		tb.Fatalf("process.start: %v", err)
	}
	if err := b.rpc.Call(ctx, rpc.ActionProcessWait, map[string]any{"run_id": r.RunID}, &r); err != nil {
		tb.Fatal(err)
	}
	var out rpc.Output
	if err := b.rpc.Call(ctx, rpc.ActionProcessOutput, map[string]any{"run_id": r.RunID}, &out); err != nil {
		tb.Fatal(err)
	}
	if r.ExitCode == nil || *r.ExitCode != 0 {
		tb.Fatalf("guest script %q: %+v\n%s", script, r, out.Data)
	}
	return out.Data
}

// checkRoot checks that the root is dev, the device Kata's root= names, ext4, read-only, with dax
// exactly when Kata's rootflags ask for it.
func checkRoot(tb testing.TB, dev string, wantDax bool, r guestRoot) {
	tb.Helper()
	tb.Logf("guest root: /dev/%s %s %s", r.device, r.fstype, strings.Join(r.options, ","))
	if "/dev/"+r.device != dev || r.fstype != "ext4" {
		tb.Errorf("root is /dev/%s (%s); want %s (ext4), the device Kata's root= names", r.device, r.fstype, dev)
	}
	ro, dax := false, false
	for _, o := range r.options {
		ro = ro || o == "ro"
		dax = dax || o == "dax" || strings.HasPrefix(o, "dax=")
	}
	if !ro {
		tb.Errorf("root options %q lack ro: Kata mounts the image read-only", r.options)
	}
	if dax != wantDax {
		tb.Errorf("root options %q: dax %v; want %v (Kata's rootflags)", r.options, dax, wantDax)
	}
}

// checkInitQuiet fails on an init console line at error level, or one that complains about the
// kernel command line: Kata's systemd.*, agent.* and the rest must be ignored quietly.
func checkInitQuiet(tb testing.TB, v *vm.VM) {
	tb.Helper()
	for _, l := range initComplaints(v) {
		tb.Errorf("init complained at %.3fs: %s", l.At.Seconds(), l.Text)
	}
}

// initComplaints are the init's console lines at error level or about the kernel command line.
func initComplaints(v *vm.VM) []vm.Line {
	var bad []vm.Line
	for _, l := range v.Console() {
		if !strings.Contains(l.Text, "component=init") {
			continue
		}
		if strings.Contains(l.Text, "level=ERROR") || strings.Contains(l.Text, "kernel parameter") ||
			strings.Contains(l.Text, "kernel command line") || strings.Contains(l.Text, "systemd.") || strings.Contains(l.Text, "agent.") {
			bad = append(bad, l)
		}
	}
	return bad
}

// TestKataInitNamesUnknownAllox shows that checkInitQuiet can fail: Kata's line plus an allox.*
// parameter the init does not know makes the init warn about exactly that one (and nothing of
// Kata's). Initrd mode: the quickest boot.
func TestKataInitNamesUnknownAllox(t *testing.T) {
	a := needAppliance(t, initrdMode)
	ctx := testContext(t, bootBudget)
	b, _ := a.bootKata(ctx, t, kataBoot{mode: initrdMode, extra: []string{"allox.kata-probe=1"}}, "")
	b.waitReady(ctx, t)
	bad := initComplaints(b.VM)
	if len(bad) != 1 || !strings.Contains(bad[0].Text, "allox.kata-probe") {
		t.Errorf("init complaints %+v; want exactly one, about allox.kata-probe", bad)
	}
	b.powerOff(ctx, t)
}
