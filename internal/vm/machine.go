package vm

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Console is the guest console device whose output the harness reads (QEMU's stdout).
type Console int

const (
	// ConsoleSerial is the 8250 UART on -serial stdio: the guest's ttyS0. console=ttyS0 is appended
	// to the command line unless it is already the last console=. The default.
	ConsoleSerial Console = iota
	// ConsoleVirtio is Kata's console: -device virtio-serial-pci,id=serial0 and -device virtconsole
	// on chardev charconsole0, the guest's hvc0, with no UART at all. Kata backs the chardev with a
	// unix socket the shim reads; the harness backs it with stdio (the guest sees the same device).
	// The command line must name console=hvc0 (Kata passes console=hvc0 console=hvc1).
	ConsoleVirtio
)

func (c Console) String() string {
	switch c {
	case ConsoleSerial:
		return "serial"
	case ConsoleVirtio:
		return "virtio"
	}
	return "Console(" + strconv.Itoa(int(c)) + ")"
}

// pageSize is the granularity QEMU needs for a memory-backend-file's size.
const pageSize = 4096

// args renders the console device.
func (c Console) args() []string {
	if c == ConsoleVirtio {
		return []string{
			"-device", "virtio-serial-pci,disable-modern=false,id=serial0",
			"-device", "virtconsole,chardev=charconsole0,id=console0",
			"-chardev", "stdio,id=charconsole0",
		}
	}
	return []string{"-serial", "stdio"}
}

// withConsole prepares the command line for the console: ttyS0 for ConsoleSerial, as given for
// ConsoleVirtio (validate checks it names hvc0).
func (c Console) withConsole(cmdline []string) []string {
	if c == ConsoleVirtio {
		return slices.Clone(cmdline)
	}
	return withSerialConsole(cmdline)
}

// memoryArg is -m: the size, and with MemSlots the hotplug slots and maxmem Kata always sets
// (memory_slots = 10, maxmem = the host's memory when default_maxmemory is 0).
func (o Options) memoryArg() string {
	if o.MemSlots == 0 {
		return strconv.Itoa(o.MemoryMiB)
	}
	return fmt.Sprintf("%dM,slots=%d,maxmem=%dM", o.MemoryMiB, o.MemSlots, o.MaxMemoryMiB)
}

// smpArg is -smp: with MaxCPUs, Kata's topology (cores=1,threads=1,sockets=maxcpus,maxcpus).
func (o Options) smpArg() string {
	if o.MaxCPUs == 0 {
		return strconv.Itoa(o.CPUs)
	}
	return fmt.Sprintf("%d,cores=1,threads=1,sockets=%d,maxcpus=%d", o.CPUs, o.MaxCPUs, o.MaxCPUs)
}

// machineArg is -machine: nvdimm=on when an NVDIMM is attached (Kata's qemuNvdimmOption).
func (o Options) machineArg() string {
	if o.Nvdimm != "" {
		return o.Machine + ",nvdimm=on"
	}
	return o.Machine
}

// cpuArgs is -cpu: "host" on KVM; with KataMachine, Kata's "host,pmu=off" (cpu_features), which
// TCG cannot run, so TCG gets "max,pmu=off" (the model with every feature TCG emulates).
func (o Options) cpuArgs() []string {
	switch {
	case o.KataMachine && o.Accel == "kvm":
		return []string{"-cpu", "host,pmu=off"}
	case o.KataMachine:
		return []string{"-cpu", "max,pmu=off"}
	case o.Accel == "kvm":
		return []string{"-cpu", "host"}
	}
	return nil
}

// kataKnobs are the rest of the machine Kata's govmm builds on q35 (qemu.go CreateVM: RTC, VGA,
// GlobalParam, Knobs, the NUMA memory backend; the RNG device). kvm-pit.lost_tick_policy is kept
// under TCG: QEMU accepts it and, with no in-kernel PIT, it has nothing to apply to.
func (o Options) kataKnobs() []string {
	if !o.KataMachine {
		return nil
	}
	return []string{
		"-rtc", "base=utc,driftfix=slew,clock=host",
		"-global", "kvm-pit.lost_tick_policy=discard",
		"-vga", "none",
		"-no-user-config",
		"-object", fmt.Sprintf("memory-backend-ram,id=dimm1,size=%dM", o.MemoryMiB),
		"-numa", "node,memdev=dimm1",
		"-object", "rng-random,id=rng0,filename=/dev/urandom",
		"-device", "virtio-rng-pci,rng=rng0",
	}
}

// nvdimmArgs attach Nvdimm read-only, as Kata's appendNvdimmImage does (the device is unarmed:
// the guest sees a read-only region).
func (o Options) nvdimmArgs() []string {
	if o.Nvdimm == "" {
		return nil
	}
	size := int64(0)
	if st, err := os.Stat(o.Nvdimm); err == nil {
		size = st.Size()
	}
	return []string{
		"-device", "nvdimm,id=nv0,memdev=mem0,unarmed=on",
		"-object", fmt.Sprintf("memory-backend-file,id=mem0,mem-path=%s,size=%d,readonly=on", optEscape(o.Nvdimm), size),
	}
}

// validateMachine checks the console, memory topology and NVDIMM options.
func (o Options) validateMachine() []error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrOptions}, args...)...))
	}
	switch o.Console {
	case ConsoleSerial:
	case ConsoleVirtio:
		if !slices.ContainsFunc(o.Cmdline, func(p string) bool { return p == "console=hvc0" || strings.HasPrefix(p, "console=hvc0,") }) {
			bad("Console is virtio but Cmdline has no console=hvc0: add it, or the guest's console output never reaches the harness")
		}
	default:
		bad("Console %d: use ConsoleSerial or ConsoleVirtio", o.Console)
	}
	if o.MemSlots < 0 || o.MaxCPUs < 0 || o.MaxMemoryMiB < 0 {
		bad("MemSlots %d, MaxMemoryMiB %d, MaxCPUs %d: must not be negative", o.MemSlots, o.MaxMemoryMiB, o.MaxCPUs)
	}
	if (o.MemSlots > 0) != (o.MaxMemoryMiB > 0) {
		bad("MemSlots %d and MaxMemoryMiB %d: set both (Kata: slots=10, maxmem=the host's memory) or neither", o.MemSlots, o.MaxMemoryMiB)
	}
	if o.MaxCPUs > 0 && o.MaxCPUs < o.CPUs {
		bad("MaxCPUs %d is below CPUs %d: raise it", o.MaxCPUs, o.CPUs)
	}
	if o.Nvdimm != "" {
		errs = append(errs, o.validateNvdimm()...)
	}
	if o.QMP != "" {
		if len(o.QMP) >= maxSocketPath {
			bad("QMP %q is %d bytes: a unix socket path must be shorter than %d; use a shorter directory", o.QMP, len(o.QMP), maxSocketPath)
		}
		if st, err := os.Stat(filepath.Dir(o.QMP)); err != nil || !st.IsDir() {
			bad("QMP %q: its directory must exist (e.g. t.TempDir())", o.QMP)
		}
	}
	return errs
}

// maxSocketPath is the size of sun_path in struct sockaddr_un on Linux.
const maxSocketPath = 108

func (o Options) validateNvdimm() []error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrOptions}, args...)...))
	}
	st, err := os.Stat(o.Nvdimm)
	switch {
	case err != nil:
		bad("Nvdimm: %v", err)
	case st.Size() == 0 || st.Size()%pageSize != 0:
		bad("Nvdimm %s is %d bytes: QEMU maps it whole, so it must be a non-zero multiple of %d (pad it, e.g. truncate -s %d)",
			o.Nvdimm, st.Size(), pageSize, (st.Size()/pageSize+1)*pageSize)
	case o.MemSlots == 0:
		bad("Nvdimm needs memory hotplug: set MemSlots and MaxMemoryMiB (Kata: 10 and the host's memory)")
	case int64(o.MaxMemoryMiB) < int64(o.MemoryMiB)+(st.Size()+(1<<20)-1)>>20:
		bad("MaxMemoryMiB %d leaves no room for the %d MiB NVDIMM beside %d MiB of RAM: raise it to at least %d",
			o.MaxMemoryMiB, (st.Size()+(1<<20)-1)>>20, o.MemoryMiB, int64(o.MemoryMiB)+(st.Size()+(1<<20)-1)>>20)
	}
	return errs
}

// args renders disk i: the harness's form, or Kata's.
func (d Disk) args(i int) []string {
	drive := fmt.Sprintf("if=none,id=d%d,file=%s,format=raw", i, optEscape(d.Path))
	dev := fmt.Sprintf("virtio-blk-pci,drive=d%d", i)
	if d.Kata {
		drive += ",aio=threads"
		dev = fmt.Sprintf("virtio-blk-pci,disable-modern=false,drive=d%d,config-wce=off,share-rw=on", i)
	}
	if d.ReadOnly {
		drive += ",readonly=on"
	}
	if d.Serial != "" {
		dev += ",serial=" + d.Serial
	}
	return []string{"-drive", drive, "-device", dev}
}
