package vm

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestArgs(t *testing.T) {
	base := Options{Accel: "tcg", Kernel: "/out/bzImage"}
	for _, tc := range []struct {
		name string
		opt  Options
		fwd  map[int]int
		want []string
	}{{
		name: "minimal",
		opt:  base,
		want: []string{"-machine", "q35", "-accel", "tcg", "-m", "512", "-smp", "1",
			"-nodefaults", "-nographic", "-no-reboot", "-serial", "stdio",
			"-kernel", "/out/bzImage", "-append", "console=ttyS0"},
	}, {
		name: "image mode on kvm",
		opt: Options{Accel: "kvm", Kernel: "/k", Cmdline: []string{"console=hvc0", "root=/dev/vda1"},
			MemoryMiB: 2048, CPUs: 2, Machine: "pc",
			Disks: []Disk{{Path: "/out/rootfs.img", ReadOnly: true}, {Path: "/t/a,b.img", Serial: "allox-store"}},
			FwCfg: map[string]string{"opt/z": "1", "opt/a": "x,y"}, ExtraArgs: []string{"-S"}},
		fwd: map[int]int{7000: 40000, 22: 40001},
		want: []string{"-machine", "pc", "-accel", "kvm", "-cpu", "host", "-m", "2048", "-smp", "2",
			"-nodefaults", "-nographic", "-no-reboot", "-serial", "stdio",
			"-kernel", "/k", "-append", "console=hvc0 root=/dev/vda1 console=ttyS0",
			"-drive", "if=none,id=d0,file=/out/rootfs.img,format=raw,readonly=on", "-device", "virtio-blk-pci,drive=d0",
			"-drive", "if=none,id=d1,file=/t/a,,b.img,format=raw", "-device", "virtio-blk-pci,drive=d1,serial=allox-store",
			"-netdev", "user,id=net0,restrict=on,hostfwd=tcp:127.0.0.1:40001-:22,hostfwd=tcp:127.0.0.1:40000-:7000",
			"-device", "virtio-net-pci,netdev=net0,romfile=",
			"-fw_cfg", "name=opt/a,file=/run/fw,,a", "-fw_cfg", "name=opt/z,file=/run/fw-z", "-S"},
	}, {
		name: "guest forwards to the host's test servers",
		opt:  Options{Accel: "tcg", Kernel: "/k", GuestFwd: map[int]int{8443: 41001, 8080: 41000}},
		fwd:  map[int]int{8093: 40000},
		want: []string{"-machine", "q35", "-accel", "tcg", "-m", "512", "-smp", "1",
			"-nodefaults", "-nographic", "-no-reboot", "-serial", "stdio", "-kernel", "/k", "-append", "console=ttyS0",
			"-netdev", "user,id=net0,restrict=on,hostfwd=tcp:127.0.0.1:40000-:8093," +
				"guestfwd=tcp:10.0.2.100:8080-cmd:busybox nc 127.0.0.1 41000,guestfwd=tcp:10.0.2.100:8443-cmd:busybox nc 127.0.0.1 41001",
			"-device", "virtio-net-pci,netdev=net0,romfile="},
	}, {
		name: "initrd",
		opt:  Options{Accel: "tcg", Kernel: "/k", Initrd: "/i.cpio.gz", Cmdline: []string{"console=ttyS0,115200"}},
		want: []string{"-machine", "q35", "-accel", "tcg", "-m", "512", "-smp", "1",
			"-nodefaults", "-nographic", "-no-reboot", "-serial", "stdio",
			"-kernel", "/k", "-initrd", "/i.cpio.gz", "-append", "console=ttyS0,115200"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.opt.withDefaults().args(tc.fwd, map[string]string{"opt/a": "/run/fw,a", "opt/z": "/run/fw-z"})
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("args (-want +got):\n%s", diff)
			}
		})
	}
}

func TestWithSerialConsole(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", "console=ttyS0"},
		{"quiet", "quiet console=ttyS0"},
		{"console=ttyS0 quiet", "console=ttyS0 quiet"},
		{"console=ttyS0,115200", "console=ttyS0,115200"},
		{"console=ttyS0 console=hvc0", "console=ttyS0 console=hvc0 console=ttyS0"},
		{"console=ttyS01", "console=ttyS01 console=ttyS0"},
	} {
		got := strings.Join(withSerialConsole(strings.Fields(tc.in)), " ")
		if got != tc.want {
			t.Errorf("withSerialConsole(%q) = %q; want %q", tc.in, got, tc.want)
		}
	}
}

func TestValidateReportsEveryProblem(t *testing.T) {
	dir := t.TempDir()
	opt := Options{
		Accel:   "hvf",
		Initrd:  filepath.Join(dir, "missing.cpio"),
		Disks:   []Disk{{Path: filepath.Join(dir, "missing.img"), Serial: "a-serial-longer-than-20"}},
		FwCfg:   map[string]string{"token": "x"},
		HostFwd: map[int]int{0: 1},
	}.withDefaults()
	err := opt.validate()
	if !errors.Is(err, ErrOptions) {
		t.Fatalf("validate = %v; want ErrOptions", err)
	}
	for _, want := range []string{"Kernel is empty", "Initrd", "Disks[0].Path", "Disks[0].Serial", `"opt/"`, "HostFwd 0→1", `Accel "hvf"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("validate error lacks %q:\n%v", want, err)
		}
	}
	kernel := filepath.Join(dir, "bzImage")
	os.WriteFile(kernel, nil, 0o644)
	if err := (Options{Accel: "tcg", Kernel: kernel}).withDefaults().validate(); err != nil {
		t.Errorf("valid options: %v", err)
	}
}

func TestShellQuote(t *testing.T) {
	for in, want := range map[string]string{
		"-m":                    "-m",
		"if=none,file=/a/b.img": "if=none,file=/a/b.img",
		"":                      "''",
		"console=ttyS0 quiet":   "'console=ttyS0 quiet'",
		"it's":                  `'it'\''s'`,
		"$HOME":                 "'$HOME'",
		"name=opt/x,string=a b": "'name=opt/x,string=a b'",
	} {
		if got := shellQuote(in); got != want {
			t.Errorf("shellQuote(%q) = %s; want %s", in, got, want)
		}
	}
}

func TestParseKernelTime(t *testing.T) {
	for _, tc := range []struct {
		line string
		want time.Duration
		ok   bool
	}{
		{"[    4.599160] Run /init as init process", 4599160 * time.Microsecond, true},
		{"[12345.000001] x", 12345*time.Second + time.Microsecond, true},
		{"[    0.000000] Linux version", 0, true},
		{"ALLOX-BOOT-DONE", 0, false},
		{"x [    4.599160]", 0, false},
		{"[ 4.5] short", 0, false},
	} {
		got, ok := ParseKernelTime(tc.line)
		if got != tc.want || ok != tc.ok {
			t.Errorf("ParseKernelTime(%q) = %v, %v; want %v, %v", tc.line, got, ok, tc.want, tc.ok)
		}
	}
}

func TestAccelChoice(t *testing.T) {
	t.Setenv(AccelEnv, "tcg")
	if a, why := chooseAccel(); a != "tcg" || !strings.Contains(why, "forced") {
		t.Errorf("%s=tcg: chooseAccel = %s, %s", AccelEnv, a, why)
	}
	t.Setenv(AccelEnv, "hvf")
	if a, why := chooseAccel(); a != "tcg" || !strings.Contains(why, "neither kvm nor tcg") {
		t.Errorf("%s=hvf: chooseAccel = %s, %s", AccelEnv, a, why)
	}
	if scaleFor("kvm") != 1 || scaleFor("tcg") != 8 {
		t.Errorf("scaleFor(kvm, tcg) = %d, %d; want 1, 8", scaleFor("kvm"), scaleFor("tcg"))
	}
}

// TestProbeKVM runs the real probe. Its answer depends on the machine, so the test checks only
// that a host without a usable /dev/kvm is never reported as having KVM.
func TestProbeKVM(t *testing.T) {
	begin := time.Now()
	err := probeKVM(probeDeadline)
	t.Logf("probeKVM: %v after %v; Accel() = %s (%s)", err, time.Since(begin), Accel(), AccelReason())
	if f, openErr := os.OpenFile("/dev/kvm", os.O_RDWR, 0); openErr != nil {
		if err == nil {
			t.Errorf("probe passed although /dev/kvm cannot be opened: %v", openErr)
		}
	} else {
		f.Close()
	}
	if time.Since(begin) > probeDeadline+time.Second {
		t.Errorf("probe took %v; it must give up after %v", time.Since(begin), probeDeadline)
	}
}
