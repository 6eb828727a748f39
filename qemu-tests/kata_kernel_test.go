package qemutests

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/allox-os/allox/deploy/kata"
	"github.com/allox-os/allox/internal/vm"
)

// These tests prove that the Kata features the parity fragments (kernel/fragments/80-kata-*.conf)
// turn on work in the built kernel: they boot the appliance's bzImage on Kata's machine (q35, its
// kernel command line with scsi_mod.scan=none, the virtio console, hotplug slots and maxcpus) with a
// small busybox init, the probe, standing in for Kata's agent. QEMU is driven through QMP exactly as
// Kata's runtime hot-plugs devices (govmm's blockdev-add/device_add scsi-hd, device_add of a CPU,
// object-add + device_add pc-dimm, qom-set of virtio-mem's requested-size), and the probe does what
// the agent does in the guest (scan the SCSI host, online a vCPU) and reports what the kernel shows
// on the console. The appliance's own init and daemon play no part in these features, and have no
// RPC that reports sysfs; a probe init is the least invasive real observer, as in TestHarnessDevices.

// probePrelude mounts what the probe reads and reports PROBE-READY; each test appends its part.
const probePrelude = `#!/bin/busybox sh
/bin/busybox mkdir -p /usr/bin /sbin /usr/sbin
/bin/busybox --install -s
export PATH=/bin:/sbin:/usr/bin:/usr/sbin
mount -t devtmpfs devtmpfs /dev
exec </dev/console >/dev/console 2>&1
mount -t proc proc /proc
mount -t sysfs sysfs /sys
memkb() { grep MemTotal /proc/meminfo | tr -s ' ' | cut -d' ' -f2; }
echo PROBE-READY
`

// probeEnd powers off once the test's part is done.
const probeEnd = "echo PROBE-DONE\npoweroff -f\n"

// probeVM is one boot of the appliance kernel with a probe init on Kata's machine.
type probeVM struct {
	*vm.VM
	t   *testing.T
	ctx context.Context
}

// bootProbe boots the built kernel with the probe script, Kata's command line and machine, a QMP
// socket, memory hotplug slots and maxcpus 4; opt adjusts the options.
func bootProbe(t *testing.T, script string, opt func(*vm.Options)) *probeVM {
	t.Helper()
	dir := t.TempDir()
	kernel, initrd := busyboxBoot(t, dir, "probe.cpio", probePrelude+script+probeEnd)
	const maxCPUs = 4
	cmdline, err := kata.KernelParams(kata.Boot{MaxVCPUs: maxCPUs, BlockDeviceDriver: kata.DefaultBlockDeviceDriver})
	if err != nil {
		t.Fatal(err)
	}
	o := vm.Options{
		Kernel: kernel, Initrd: initrd, Cmdline: cmdline, Console: vm.ConsoleVirtio, KataMachine: true,
		MemoryMiB: 512, MemSlots: kataMemorySlots, MaxMemoryMiB: 2048, CPUs: 1, MaxCPUs: maxCPUs,
		QMP: filepath.Join(dir, "qmp.sock"),
	}
	if opt != nil {
		opt(&o)
	}
	ctx := testContext(t, 120*time.Second)
	v, err := vm.Start(ctx, t, o)
	if err != nil {
		t.Fatal(err)
	}
	p := &probeVM{VM: v, t: t, ctx: ctx}
	p.waitFor("PROBE-READY")
	return p
}

func (p *probeVM) waitFor(marker string) string {
	p.t.Helper()
	l, err := p.WaitFor(p.ctx, marker)
	if err != nil {
		p.Kill()
		p.t.Fatal(err)
	}
	return l
}

func (p *probeVM) qmp(command string, args any) json.RawMessage {
	p.t.Helper()
	ret, err := p.QMP(p.ctx, command, args)
	if err != nil {
		p.Kill()
		p.t.Fatal(err)
	}
	return ret
}

// done waits for the probe to finish and QEMU to exit.
func (p *probeVM) done() {
	p.t.Helper()
	p.waitFor("PROBE-DONE")
	if err := p.Wait(); err != nil {
		p.t.Fatal(err)
	}
}

// field returns the value of key=value in a marker line.
func field(line, key string) string {
	for _, f := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			return v
		}
	}
	return ""
}

// A disk hot-plugged as Kata's default block_device_driver attaches it (blockdev-add, then
// device_add scsi-hd on the virtio-scsi controller's bus) appears as a SCSI disk once the guest
// scans the target, as the agent does under scsi_mod.scan=none, and reads back what the host wrote.
func TestKataParitySCSIDisk(t *testing.T) {
	const content = "allox-scsi-canary"
	disk := filepath.Join(t.TempDir(), "scsi.img")
	data := make([]byte, 8<<20)
	copy(data, content)
	if err := os.WriteFile(disk, data, 0o644); err != nil {
		t.Fatal(err)
	}
	p := bootProbe(t, `
echo "PROBE-BEFORE disks=$(ls /sys/block | tr '\n' ' ')"
until [ -e /sys/block/sda ]; do
  for s in /sys/class/scsi_host/host*/scan; do echo "0 1 0" > $s 2>/dev/null; done
  sleep 0.2
done
echo "PROBE-SCSI path=$(readlink -f /sys/block/sda) size=$(cat /sys/block/sda/size) data=$(dd if=/dev/sda bs=17 count=1 2>/dev/null)"
`, func(o *vm.Options) { o.SCSIController = true })
	if before := p.waitFor("PROBE-BEFORE"); strings.Contains(before, "sd") {
		t.Errorf("%s: a SCSI disk before the hotplug, but scsi_mod.scan=none and no disk attached", before)
	}
	p.qmp("blockdev-add", map[string]any{"driver": "raw", "node-name": "drive-scsi1",
		"file": map[string]any{"driver": "file", "filename": disk}})
	p.qmp("device_add", map[string]any{"driver": "scsi-hd", "id": "scsi-disk1", "drive": "drive-scsi1",
		"bus": "scsi0.0", "scsi-id": 1, "lun": 0})
	line := p.waitFor("PROBE-SCSI")
	p.done()
	if path := field(line, "path"); !strings.Contains(path, "/virtio") || !strings.Contains(path, "/target0:0:1/0:0:1:0/block/sda") {
		t.Errorf("sda at %q: want it behind the virtio-scsi host, target 1 LUN 0", path)
	}
	if got := field(line, "size"); got != strconv.Itoa(len(data)/512) {
		t.Errorf("sda has %s sectors, want %d", got, len(data)/512)
	}
	if got := field(line, "data"); got != content {
		t.Errorf("sda starts with %q, want what the host wrote, %q", got, content)
	}
}

// A vCPU hot-plugged through QMP (device_add of the first free slot query-hotpluggable-cpus lists,
// as Kata's hotplugAddCPUs with ExecuteCPUDeviceAdd; QEMU lists the highest socket first) is found
// by ACPI and comes online when the guest onlines it, as the agent does.
func TestKataParityCPUHotplug(t *testing.T) {
	p := bootProbe(t, `
echo "PROBE-CPUS before=$(cat /sys/devices/system/cpu/online)"
until cpu=$(ls -d /sys/devices/system/cpu/cpu[1-9]* 2>/dev/null | head -n 1); [ -n "$cpu" ]; do sleep 0.2; done
[ "$(cat $cpu/online)" = 0 ] && echo 1 > $cpu/online
echo "PROBE-CPUS after=$(cat /sys/devices/system/cpu/online) added=${cpu##*/} online=$(cat $cpu/online) processors=$(grep -c ^processor /proc/cpuinfo)"
`, tcgCPUHotplug)
	if got := field(p.waitFor("PROBE-CPUS before="), "before"); got != "0" {
		t.Errorf("online CPUs before the hotplug: %q, want 0", got)
	}
	var slots []struct {
		Type    string         `json:"type"`
		Props   map[string]any `json:"props"`
		QOMPath string         `json:"qom-path"`
	}
	if err := json.Unmarshal(p.qmp("query-hotpluggable-cpus", nil), &slots); err != nil {
		t.Fatal(err)
	}
	var add map[string]any
	for _, s := range slots {
		if s.QOMPath == "" {
			add = map[string]any{"driver": s.Type, "id": "cpu-hp1"}
			for k, v := range s.Props {
				add[k] = v
			}
			break
		}
	}
	if add == nil {
		p.Kill()
		t.Fatalf("no free CPU slot in %+v: maxcpus is 4", slots)
	}
	p.qmp("device_add", add)
	line := p.waitFor("PROBE-CPUS after=")
	p.done()
	if field(line, "online") != "1" || field(line, "processors") != "2" || field(line, "after") == "0" {
		t.Errorf("%s: want the added vCPU online beside cpu0, 2 processors", line)
	}
}

// tcgCPUHotplug lets a TCG guest see QEMU's hot-pluggable vCPUs. Linux counts the MADT's disabled
// LAPIC entries (QEMU's maxcpus slots) as hot-pluggable only under a hypervisor it recognises
// (acpi_is_processor_usable: "QEMU expects legacy Enabled=0 LAPIC entries to be counted"); Kata
// always runs KVM, whose CPUID leaves say so, but TCG has none and the guest takes itself for bare
// metal ("Allowing 1 present CPUs plus 0 hotplug CPUs"). Under TCG the guest is made to recognise
// a hypervisor through QEMU's VMware backdoor (the vmport device q35 has) and an SMBIOS serial
// naming VMware, with the CPUID hypervisor bit off so that the backdoor path is the one taken.
func tcgCPUHotplug(o *vm.Options) {
	if o.Accel == "tcg" || (o.Accel == "" && vm.Accel() == "tcg") {
		o.ExtraArgs = append(o.ExtraArgs, "-cpu", "max,pmu=off,-hypervisor", "-smbios", "type=1,serial=VMware-allox")
	}
}

// memoryProbe waits until MemTotal grows by at least 200 MiB without the guest onlining anything:
// the kernel onlines hot-added memory itself (MHP_DEFAULT_ONLINE_TYPE_ONLINE_AUTO).
const memoryProbe = `
before=$(memkb)
echo "PROBE-MEM before=$before policy=$(cat /sys/devices/system/memory/auto_online_blocks)"
until [ $(memkb) -ge $((before + 204800)) ]; do sleep 0.2; done
echo "PROBE-MEM after=$(memkb) offline=$(grep -l offline /sys/devices/system/memory/memory*/state | wc -l)"
`

// checkMemoryGrew reads the two PROBE-MEM lines around the hotplug of 256 MiB.
func checkMemoryGrew(t *testing.T, before, after string) {
	t.Helper()
	if got := field(before, "policy"); got != "online" {
		t.Errorf("auto_online_blocks = %q, want online (the kernel onlines hot-added memory, as Kata expects)", got)
	}
	b, _ := strconv.Atoi(field(before, "before"))
	a, _ := strconv.Atoi(field(after, "after"))
	if a-b < 200<<10 || a-b > 256<<10 {
		t.Errorf("MemTotal %d kB → %d kB: want it to grow by the 256 MiB hot-plugged", b, a)
	}
	if got := field(after, "offline"); got != "0" {
		t.Errorf("%s memory block(s) left offline", got)
	}
}

// A pc-dimm hot-plugged through QMP, Kata's default memory hotplug (ExecHotplugMemory: object-add
// memory-backend-ram, device_add pc-dimm), arrives through ACPI and the kernel onlines it.
func TestKataParityMemoryHotplugDIMM(t *testing.T) {
	p := bootProbe(t, memoryProbe, nil)
	before := p.waitFor("PROBE-MEM before=")
	p.qmp("object-add", map[string]any{"qom-type": "memory-backend-ram", "id": "mem-hp1", "size": 256 << 20})
	p.qmp("device_add", map[string]any{"driver": "pc-dimm", "id": "dimm-hp1", "memdev": "mem-hp1"})
	after := p.waitFor("PROBE-MEM after=")
	p.done()
	checkMemoryGrew(t, before, after)
}

// A virtio-mem device (Kata's enable_virtio_mem) grown through QMP (qom-set requested-size) plugs
// memory the kernel onlines.
func TestKataParityMemoryHotplugVirtioMem(t *testing.T) {
	p := bootProbe(t, memoryProbe, func(o *vm.Options) {
		o.ExtraArgs = append(o.ExtraArgs, "-object", "memory-backend-ram,id=vmem0,size=1G",
			"-device", "virtio-mem-pci,id=vmem-dev0,memdev=vmem0,requested-size=0")
	})
	before := p.waitFor("PROBE-MEM before=")
	p.qmp("qom-set", map[string]any{"path": "/machine/peripheral/vmem-dev0", "property": "requested-size", "value": 256 << 20})
	after := p.waitFor("PROBE-MEM after=")
	p.done()
	checkMemoryGrew(t, before, after)
}

// The CRI puts hugepage limits into every container's spec: the hugetlb controller must exist in
// cgroup v2 with its per-size files, and hugetlbfs must mount and serve pages.
func TestKataParityHugetlb(t *testing.T) {
	p := bootProbe(t, `
mount -t cgroup2 cgroup2 /sys/fs/cgroup
echo +hugetlb > /sys/fs/cgroup/cgroup.subtree_control
mkdir /sys/fs/cgroup/pod
echo 4194304 > /sys/fs/cgroup/pod/hugetlb.2MB.max
echo "PROBE-CGROUP controllers=$(cat /sys/fs/cgroup/cgroup.controllers | tr ' ' ,) max=$(cat /sys/fs/cgroup/pod/hugetlb.2MB.max) files=$(cd /sys/fs/cgroup/pod && ls -d hugetlb.2MB.* | tr '\n' ,)"
echo 4 > /proc/sys/vm/nr_hugepages
mkdir -p /dev/hugepages
mount -t hugetlbfs -o pagesize=2M hugetlbfs /dev/hugepages
echo "PROBE-HUGETLBFS mounted=$(grep -c ' /dev/hugepages hugetlbfs ' /proc/mounts) pages=$(grep HugePages_Total /proc/meminfo | tr -s ' ' | cut -d' ' -f2)"
`, nil)
	cg := p.waitFor("PROBE-CGROUP")
	fs := p.waitFor("PROBE-HUGETLBFS")
	p.done()
	if !strings.Contains(","+field(cg, "controllers")+",", ",hugetlb,") {
		t.Errorf("%s: no hugetlb controller", cg)
	}
	for _, f := range []string{"hugetlb.2MB.max", "hugetlb.2MB.current", "hugetlb.2MB.events", "hugetlb.2MB.rsvd.max"} {
		if !strings.Contains(field(cg, "files"), f+",") {
			t.Errorf("%s: the pod cgroup lacks %s", cg, f)
		}
	}
	if field(cg, "max") != "4194304" {
		t.Errorf("%s: hugetlb.2MB.max did not take the limit", cg)
	}
	if field(fs, "mounted") != "1" || field(fs, "pages") != "4" {
		t.Errorf("%s: want hugetlbfs mounted and 4 huge pages reserved", fs)
	}
}

// Landlock is an active LSM (listed in securityfs, initialised at boot), and the hardening Kata
// asks for is in force: no vsyscall page in a process's map.
func TestKataParityLandlock(t *testing.T) {
	p := bootProbe(t, `
mount -t securityfs securityfs /sys/kernel/security
echo "PROBE-LSM lsm=$(cat /sys/kernel/security/lsm) up=$(dmesg | grep -c 'landlock: Up and running') vsyscall=$(grep -c vsyscall /proc/self/maps)"
`, nil)
	line := p.waitFor("PROBE-LSM")
	p.done()
	if !strings.Contains(","+field(line, "lsm")+",", ",landlock,") || field(line, "up") != "1" {
		t.Errorf("%s: want landlock in the LSM list and its boot message", line)
	}
	if field(line, "vsyscall") != "0" {
		t.Errorf("%s: a [vsyscall] mapping, but LEGACY_VSYSCALL_NONE is set", line)
	}
}
