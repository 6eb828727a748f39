package qemutests

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/allox-os/allox/deploy/kata"
	"github.com/allox-os/allox/internal/vm"
	"github.com/cavaliergopher/cpio"
)

// TestCgroupPackageInGuest runs the tests of internal/cgroup as root on the appliance kernel's
// pure cgroup v2 hierarchy, where cpu, memory and pids exist (a hybrid host has none of them):
// limits written by Create and Update — NoLimit read back as "max", memory.oom.group — the
// controllers enabled for children, freeze, kill and tree removal. The test binary rides in a
// second cpio archive appended to a busybox initramfs (the kernel unpacks both).
func TestCgroupPackageInGuest(t *testing.T) {
	dir := t.TempDir()
	kernel, initrd := busyboxBoot(t, dir, "cgroup.cpio", probePrelude+`
mount -t cgroup2 cgroup2 /sys/fs/cgroup
for c in $(cat /sys/fs/cgroup/cgroup.controllers); do echo +$c > /sys/fs/cgroup/cgroup.subtree_control; done
mkdir -p /tmp && mount -t tmpfs tmpfs /tmp
/cgroup.test -test.v -test.count=1 > /tmp/out 2>&1
rc=$?
cat /tmp/out
echo "PROBE-CGTEST rc=$rc controllers=$(cat /sys/fs/cgroup/cgroup.subtree_control | tr ' ' ,)"
`+probeEnd)
	bin := filepath.Join(dir, "cgroup.test")
	cmd := exec.Command("go", "test", "-c", "-trimpath", "-o", bin, "github.com/allox-os/allox/internal/cgroup")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go test -c internal/cgroup: %v\n%s", err, out)
	}
	appendFile(t, initrd, bin, "cgroup.test")

	cmdline, err := kata.KernelParams(kata.Boot{MaxVCPUs: 1, BlockDeviceDriver: kata.DefaultBlockDeviceDriver})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testContext(t, 120*time.Second)
	v, err := vm.Start(ctx, t, vm.Options{Kernel: kernel, Initrd: initrd, Cmdline: cmdline,
		Console: vm.ConsoleVirtio, KataMachine: true, MemoryMiB: 512, CPUs: 1})
	if err != nil {
		t.Fatal(err)
	}
	p := &probeVM{VM: v, t: t, ctx: ctx}
	end := p.waitFor("PROBE-CGTEST")
	p.done()
	results := map[string]string{}
	for _, l := range v.Console() {
		f := strings.Fields(l.Text)
		if len(f) >= 3 && f[0] == "---" && strings.HasPrefix(f[2], "Test") {
			results[f[2]] = strings.TrimSuffix(f[1], ":")
		}
	}
	t.Logf("%s; tests %v", end, results)
	if field(end, "rc") != "0" {
		t.Errorf("the package's tests failed in the guest (%s): %v", end, results)
	}
	for _, name := range []string{"TestLimits", "TestEnableForChildren", "TestFreezeThaw", "TestKillWaitAndDeleteTree",
		"TestKillWaitWaitsUntilEmpty", "TestOpenStartsInsideAndProcsListsIt", "TestMissingGroupIsNoError"} {
		if results[name] != "PASS" {
			t.Errorf("%s in the guest: %q, want PASS", name, results[name])
		}
	}
	for name, r := range results {
		if r != "PASS" {
			t.Errorf("%s in the guest: %s; on the guest's kernel nothing may skip", name, r)
		}
	}
}

// appendFile appends to the cpio archive at initrd a second archive holding src as /name.
func appendFile(t *testing.T, initrd, src, name string) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(initrd, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := cpio.NewWriter(f)
	if err := w.WriteHeader(&cpio.Header{Name: name, Mode: cpio.TypeReg | 0o755, Size: int64(len(data)), Links: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}
