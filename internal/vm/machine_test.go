package vm

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// kataLine is a Kata-style command line: Kata's consoles come before root=.
var kataLine = []string{"tsc=reliable", "console=hvc0", "console=hvc1", "root=/dev/pmem0p1", "panic=1"}

func sizedFile(t *testing.T, name string, size int64) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	f, err := os.Create(p)
	if err == nil {
		err = errors.Join(f.Truncate(size), f.Close())
	}
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestKataMachineArgs compares the rendered arguments with the QEMU command line Kata's govmm
// builds on q35 (LaunchQemu's order differs; each argument's contents are Kata's), less what TCG
// cannot run: accel=kvm and -cpu host.
func TestKataMachineArgs(t *testing.T) {
	img := sizedFile(t, "a,b.img", 111<<20)
	kernel := sizedFile(t, "bzImage", 0)
	opt := Options{Accel: "tcg", Kernel: kernel, Cmdline: kataLine, MemoryMiB: 2048, CPUs: 1,
		Console: ConsoleVirtio, Nvdimm: img, MemSlots: 10, MaxMemoryMiB: 24105, MaxCPUs: 2, KataMachine: true}
	want := []string{"-machine", "q35,nvdimm=on", "-accel", "tcg", "-cpu", "max,pmu=off",
		"-m", "2048M,slots=10,maxmem=24105M", "-smp", "1,cores=1,threads=1,sockets=2,maxcpus=2",
		"-nodefaults", "-nographic", "-no-reboot",
		"-device", "virtio-serial-pci,disable-modern=false,id=serial0",
		"-device", "virtconsole,chardev=charconsole0,id=console0",
		"-chardev", "stdio,id=charconsole0",
		"-rtc", "base=utc,driftfix=slew,clock=host",
		"-global", "kvm-pit.lost_tick_policy=discard",
		"-vga", "none", "-no-user-config",
		"-object", "memory-backend-ram,id=dimm1,size=2048M", "-numa", "node,memdev=dimm1",
		"-object", "rng-random,id=rng0,filename=/dev/urandom", "-device", "virtio-rng-pci,rng=rng0",
		"-device", "nvdimm,id=nv0,memdev=mem0,unarmed=on",
		"-object", "memory-backend-file,id=mem0,mem-path=" + strings.ReplaceAll(img, ",", ",,") + ",size=116391936,readonly=on",
		"-kernel", kernel, "-append", strings.Join(kataLine, " ")}
	o := opt.withDefaults()
	if err := o.validate(); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, o.args(nil, nil)); diff != "" {
		t.Errorf("args (-want +got):\n%s", diff)
	}
	if got := (Options{Accel: "kvm", KataMachine: true}).cpuArgs(); !cmp.Equal(got, []string{"-cpu", "host,pmu=off"}) {
		t.Errorf("KVM cpu = %q; want Kata's host,pmu=off", got)
	}
}

// TestVirtioConsoleKeepsCmdline checks that the virtio console neither appends console=ttyS0 nor
// adds a UART: the guest's /dev/console must be hvc0.
func TestVirtioConsoleKeepsCmdline(t *testing.T) {
	o := Options{Accel: "tcg", Kernel: "/k", Cmdline: kataLine, Console: ConsoleVirtio}.withDefaults()
	if diff := cmp.Diff(kataLine, o.Cmdline); diff != "" {
		t.Errorf("cmdline (-want +got):\n%s", diff)
	}
	for _, a := range o.args(nil, nil) {
		if strings.Contains(a, "ttyS0") || a == "-serial" {
			t.Errorf("virtio console args contain %q", a)
		}
	}
}

func TestValidateMachine(t *testing.T) {
	dir := t.TempDir()
	kernel := filepath.Join(dir, "bzImage")
	if err := os.WriteFile(kernel, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	odd := sizedFile(t, "odd.img", 7627776+1)
	good := sizedFile(t, "good.img", 64<<20)
	for _, tc := range []struct {
		name string
		opt  Options
		want []string
	}{
		{"virtio console without hvc0", Options{Console: ConsoleVirtio, Cmdline: []string{"console=ttyS0"}}, []string{"no console=hvc0"}},
		{"unknown console", Options{Console: 7}, []string{"Console 7"}},
		{"slots without maxmem", Options{MemSlots: 10}, []string{"set both"}},
		{"maxcpus below cpus", Options{CPUs: 2, MaxCPUs: 1}, []string{"MaxCPUs 1 is below CPUs 2"}},
		{"missing nvdimm", Options{Nvdimm: filepath.Join(dir, "none.img"), MemSlots: 10, MaxMemoryMiB: 4096}, []string{"Nvdimm:", "no such file"}},
		{"unaligned nvdimm", Options{Nvdimm: odd, MemSlots: 10, MaxMemoryMiB: 4096}, []string{"multiple of 4096", "truncate -s 7630848"}},
		{"nvdimm without slots", Options{Nvdimm: good}, []string{"needs memory hotplug"}},
		{"maxmem too small", Options{Nvdimm: good, MemoryMiB: 512, MemSlots: 1, MaxMemoryMiB: 520}, []string{"raise it to at least 576"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.opt.Accel, tc.opt.Kernel = "tcg", kernel
			err := tc.opt.withDefaults().validate()
			if !errors.Is(err, ErrOptions) {
				t.Fatalf("validate = %v; want ErrOptions", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("validate error lacks %q:\n%v", w, err)
				}
			}
		})
	}
	ok := Options{Accel: "tcg", Kernel: kernel, Cmdline: kataLine, Console: ConsoleVirtio, Nvdimm: good, MemSlots: 10, MaxMemoryMiB: 4096, MaxCPUs: 2, KataMachine: true}
	if err := ok.withDefaults().validate(); err != nil {
		t.Errorf("Kata's options: %v", err)
	}
}

// TestVirtioConsoleRead runs the harness on a stand-in QEMU that writes to stdout only if it was
// given the virtconsole on a stdio chardev: the harness reads the virtio console from there.
func TestVirtioConsoleRead(t *testing.T) {
	qemu := fakeQEMU(t, `case "$*" in *"virtconsole,chardev=charconsole0"*"-chardev stdio,id=charconsole0"*) echo 'hvc0: ALLOX-BOOT-DONE';; *) echo "no virtio console in: $*";; esac`)
	opt := fakeOptions(t, qemu)
	opt.Console, opt.Cmdline = ConsoleVirtio, kataLine
	v := start(t, t, t.Context(), opt)
	if line, err := v.WaitFor(t.Context(), "ALLOX-BOOT-DONE"); err != nil || line != "hvc0: ALLOX-BOOT-DONE" {
		t.Fatalf("WaitFor = %q, %v", line, err)
	}
	if err := v.Wait(); err != nil {
		t.Fatal(err)
	}
}

func TestKataDiskArgs(t *testing.T) {
	got := Disk{Path: "/o/rootfs.img", Serial: "image-0123abcd", ReadOnly: true, Kata: true}.args(0)
	want := []string{"-drive", "if=none,id=d0,file=/o/rootfs.img,format=raw,aio=threads,readonly=on",
		"-device", "virtio-blk-pci,disable-modern=false,drive=d0,config-wce=off,share-rw=on,serial=image-0123abcd"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Kata disk (-want +got):\n%s", diff)
	}
}

func TestConsoleString(t *testing.T) {
	for c, want := range map[Console]string{ConsoleSerial: "serial", ConsoleVirtio: "virtio", 9: "Console(9)"} {
		if got := c.String(); got != want {
			t.Errorf("Console(%d).String() = %q; want %q", int(c), got, want)
		}
	}
}
