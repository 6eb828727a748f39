package vm

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
)

// Disk is a raw disk image attached as virtio-blk, in order: the first one becomes /dev/vda.
type Disk struct {
	Path     string
	Serial   string // virtio serial (at most 20 bytes), seen by the guest in /sys/block/vdX/serial
	ReadOnly bool
	// Kata renders the disk as Kata's virtio-blk image (govmm BlockDevice): aio=threads on the
	// drive; disable-modern=false, config-wce=off and share-rw=on on the device.
	Kata bool
}

// Options describe one boot. Zero values take the defaults named on each field.
type Options struct {
	QEMU      string   // the QEMU binary; default "qemu-system-x86_64"
	Accel     string   // "kvm" or "tcg"; "" uses Accel()
	Kernel    string   // bzImage (required)
	Initrd    string   // optional initramfs
	Cmdline   []string // kernel parameters; console=ttyS0 is appended unless it is already the last console=
	Disks     []Disk
	MemoryMiB int               // default 512
	CPUs      int               // default 1
	FwCfg     map[string]string // fw_cfg name (must start with "opt/") → string value
	HostFwd   map[int]int       // guest TCP port → host port on 127.0.0.1; host port 0 picks a free one
	// GuestFwd makes guest TCP connections to GuestFwdAddr:port reach the host's 127.0.0.1:port2
	// (port → port2): the one way out of the guest's restricted user network, for test servers.
	// Each connection gets its own relay, `busybox nc` (a socket chardev would carry one
	// connection only, and never pass on its end).
	GuestFwd  map[int]int
	Machine   string   // default "q35"
	ExtraArgs []string // appended to the QEMU command line as they are

	// Kata's machine (see machine.go). Console picks the console device the harness reads.
	Console Console
	// Nvdimm is a raw image attached read-only as an NVDIMM (/dev/pmem0), as Kata attaches its
	// image by default on x86_64; it turns on nvdimm=on and needs MemSlots and MaxMemoryMiB.
	Nvdimm       string
	MemSlots     int  // memory hotplug slots (-m ...,slots=); Kata: 10
	MaxMemoryMiB int  // -m ...,maxmem=; with MemSlots
	MaxCPUs      int  // -smp ...,maxcpus= with Kata's topology; 0: no CPU hotplug
	KataMachine  bool // Kata's -cpu (host,pmu=off; TCG: max,pmu=off), -rtc, -vga none, NUMA memory backend, virtio-rng

	// QMP is the path of a unix socket for QEMU's QMP monitor (VM.QMP talks to it), through which a
	// test hot-plugs CPUs, memory and disks as Kata's runtime does; "" for none.
	QMP string
	// SCSIController adds Kata's virtio-scsi controller (bus scsi0.0) for hot-plugged scsi-hd disks.
	SCSIController bool

	// DetachDir, when set, detaches QEMU from this process so that it can outlive it (the Probe's
	// sandboxes survive a Probe restart): QEMU runs in its own process group, and its console and
	// stderr go to the files DetachConsole and DetachStderr in DetachDir, which the harness tails,
	// instead of pipes that would break when this process dies.
	DetachDir string
}

// The files of a detached QEMU (Options.DetachDir).
const (
	DetachConsole = "console.raw"
	DetachStderr  = "qemu-stderr.raw"
)

// ErrOptions is wrapped by every validation error of Options.
var ErrOptions = errors.New("invalid vm options")

const maxSerial = 20 // virtio-blk serial length (VIRTIO_BLK_ID_BYTES)

func (o Options) withDefaults() Options {
	if o.QEMU == "" {
		o.QEMU = "qemu-system-x86_64"
	}
	if o.MemoryMiB == 0 {
		o.MemoryMiB = 512
	}
	if o.CPUs == 0 {
		o.CPUs = 1
	}
	if o.Machine == "" {
		o.Machine = "q35"
	}
	o.Cmdline = o.Console.withConsole(o.Cmdline)
	return o
}

// validate checks the options and returns every problem at once.
func (o Options) validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrOptions}, args...)...))
	}
	if o.Kernel == "" {
		bad("Kernel is empty: set it to a bzImage path")
	}
	for _, f := range []struct{ field, path string }{{"Kernel", o.Kernel}, {"Initrd", o.Initrd}} {
		if f.path != "" {
			if _, err := os.Stat(f.path); err != nil {
				bad("%s: %v", f.field, err)
			}
		}
	}
	for i, d := range o.Disks {
		if _, err := os.Stat(d.Path); err != nil {
			bad("Disks[%d].Path: %v", i, err)
		}
		if len(d.Serial) > maxSerial || strings.ContainsAny(d.Serial, ", ") {
			bad("Disks[%d].Serial %q: at most %d bytes, no commas or spaces", i, d.Serial, maxSerial)
		}
	}
	for name := range o.FwCfg {
		if !strings.HasPrefix(name, "opt/") || strings.Contains(name, ",") {
			bad("FwCfg name %q: must start with \"opt/\" and hold no comma, e.g. \"opt/org.allox/token\"", name)
		}
	}
	for guest, host := range o.GuestFwd {
		if guest < 1 || guest > 65535 || host < 1 || host > 65535 {
			bad("GuestFwd %d→%d: both ports must be 1..65535", guest, host)
		}
	}
	for guest, host := range o.HostFwd {
		if guest < 1 || guest > 65535 || host < 0 || host > 65535 {
			bad("HostFwd %d→%d: guest port must be 1..65535, host port 0..65535 (0 picks one)", guest, host)
		}
	}
	if o.Accel != "kvm" && o.Accel != "tcg" {
		bad("Accel %q: must be \"kvm\" or \"tcg\"", o.Accel)
	}
	if o.MemoryMiB < 0 || o.CPUs < 0 {
		bad("MemoryMiB %d, CPUs %d: must not be negative", o.MemoryMiB, o.CPUs)
	}
	errs = append(errs, o.validateMachine()...)
	return errors.Join(errs...)
}

// args renders the QEMU arguments; hostFwd has every host port resolved, and fwCfgFiles names the
// file holding each FwCfg value (fw_cfg's file= form: a string= value, such as the appliance's
// bearer token, would be readable by every user of the host in QEMU's /proc/PID/cmdline). The
// order is fixed (maps are sorted) so that the same options always give the same command line.
func (o Options) args(hostFwd map[int]int, fwCfgFiles map[string]string) []string {
	a := []string{
		"-machine", o.machineArg(), "-accel", o.Accel,
	}
	a = append(a, o.cpuArgs()...)
	a = append(a, "-m", o.memoryArg(), "-smp", o.smpArg(), "-nodefaults", "-nographic", "-no-reboot")
	a = append(a, o.Console.args()...)
	a = append(a, o.kataKnobs()...)
	a = append(a, o.nvdimmArgs()...)
	a = append(a, o.qmpArgs()...)
	a = append(a, o.scsiControllerArgs()...)
	a = append(a, "-kernel", o.Kernel)
	if o.Initrd != "" {
		a = append(a, "-initrd", o.Initrd)
	}
	a = append(a, "-append", strings.Join(o.Cmdline, " "))
	for i, d := range o.Disks {
		a = append(a, d.args(i)...)
	}
	if len(hostFwd) > 0 || len(o.GuestFwd) > 0 {
		netdev := "user,id=net0,restrict=on"
		for _, guest := range sortedKeys(hostFwd) {
			netdev += fmt.Sprintf(",hostfwd=tcp:127.0.0.1:%d-:%d", hostFwd[guest], guest)
		}
		// restrict=on keeps the guest from everything else: explicit forwards still work.
		for _, guest := range sortedKeys(o.GuestFwd) {
			netdev += fmt.Sprintf(",guestfwd=tcp:%s:%d-cmd:busybox nc 127.0.0.1 %d", GuestFwdAddr, guest, o.GuestFwd[guest])
		}
		// romfile= drops the iPXE option ROM: the guest boots its kernel directly, as Kata does.
		a = append(a, "-netdev", netdev, "-device", "virtio-net-pci,netdev=net0,romfile=")
	}
	for _, name := range sortedKeys(o.FwCfg) {
		a = append(a, "-fw_cfg", fmt.Sprintf("name=%s,file=%s", name, optEscape(fwCfgFiles[name])))
	}
	return append(a, o.ExtraArgs...)
}

// GuestFwdAddr is the address in the guest's user network that Options.GuestFwd forwards from.
const GuestFwdAddr = "10.0.2.100"

// withSerialConsole makes ttyS0 the last console= so that /dev/console (init's output) is the
// serial port the harness reads.
func withSerialConsole(cmdline []string) []string {
	last := ""
	for _, p := range cmdline {
		if v, ok := strings.CutPrefix(p, "console="); ok {
			last = v
		}
	}
	if last == "ttyS0" || strings.HasPrefix(last, "ttyS0,") {
		return slices.Clone(cmdline)
	}
	return append(slices.Clone(cmdline), "console=ttyS0")
}

// optEscape doubles commas, QEMU's escape inside a key=value option list.
func optEscape(s string) string { return strings.ReplaceAll(s, ",", ",,") }

func sortedKeys[K cmp.Ordered, V any](m map[K]V) []K { return slices.Sorted(maps.Keys(m)) }
