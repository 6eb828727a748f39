package qemutests

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/allox-os/allox/deploy/kata"
	"github.com/allox-os/allox/internal/appliance"
	"github.com/allox-os/allox/internal/artifact"
	"github.com/allox-os/allox/internal/rpc"
	"github.com/allox-os/allox/internal/vm"
)

// verityOut is the subdirectory of outDir() that `make image` builds from testdata/verity.hcl: the
// default appliance with its root filesystem behind dm-verity (rootfs.verity = true).
const verityOut = "verity"

// verityProbeDir holds files nothing reads at boot (update-ca-certificates never runs in the
// guest), so the first read of one goes to the disk, through dm-verity, when the test asks for it.
const verityProbeDir = "/usr/share/ca-certificates/mozilla"

// TestVerityRoot boots the verity appliance as Kata's runtime would for kernel_verity_params and
// shows that the root is the dm-verity device over partitions 1 and 2: the sandboxed system dirs come
// read-only from the root device, which is dm-0, a device-mapper device exactly as long as the verity
// table; the kernel ran the table; a file read through it has the bytes the image holds; and the
// appliance is ready.
func TestVerityRoot(t *testing.T) {
	a := needVerityAppliance(t)
	probe := verityProbe(t, a.path(artifact.Rootfs))
	ctx := testContext(t, 2*bootBudget)
	b := a.boot(ctx, t, imageMode, blankDisk(t))
	b.waitReady(ctx, t)
	b.checkSystemInfo(ctx, t)

	// The sandbox's /usr is a read-only bind of the root's: its device is the root's.
	r := b.verityRun(ctx, t, "cat", "/proc/self/mountinfo")
	usr := mountOf(r.stdout, "/usr")
	t.Logf("/usr in the sandbox: %s", usr)
	m := regexp.MustCompile(`^\d+ \d+ (\d+):0 /usr /usr ro,.* - ext4 /dev/root ro,`).FindStringSubmatch(usr)
	if m == nil {
		t.Fatalf("/usr in the sandbox is %q; want a read-only bind of the read-only ext4 root, device minor 0", usr)
	}
	dev := m[1]
	r = b.verityRun(ctx, t, "cat", "/proc/devices")
	if !regexp.MustCompile(`(?m)^\s*` + dev + ` device-mapper$`).MatchString(r.stdout) {
		t.Errorf("the root's major %s is not device-mapper in /proc/devices:\n%s", dev, r.stdout)
	}
	// dm-0 is exactly as long as the verity table says: data_blocks of 4 KiB, in 1 KiB units here.
	v, err := kata.ParseKernelVerityParams(a.info.KernelVerityParams)
	if err != nil {
		t.Fatal(err)
	}
	r = b.verityRun(ctx, t, "cat", "/proc/partitions")
	want := fmt.Sprintf(`(?m)^\s*%s\s+0\s+%d dm-0$`, dev, v.DataBlocks*uint64(v.DataBlockSize)/1024)
	if !regexp.MustCompile(want).MatchString(r.stdout) {
		t.Errorf("/proc/partitions lacks dm-0 of %d data blocks (%s):\n%s", v.DataBlocks, want, r.stdout)
	}
	r = b.verityRun(ctx, t, "cat", "/proc/cmdline")
	for _, want := range []string{"root=/dev/dm-0", `dm-mod.create="dm-verity,,,ro,0 `, " verity 1 /dev/vda1 /dev/vda2 4096 4096 "} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("/proc/cmdline lacks %q:\n%s", want, r.stdout)
		}
	}
	r = b.verityRun(ctx, t, "sha256sum", probe.path)
	if r.exit != 0 || !strings.HasPrefix(r.stdout, probe.sha256+" ") {
		t.Errorf("sha256sum %s through dm-verity: exit %d, %q; want %s from the image", probe.path, r.exit, r.stdout+r.stderr, probe.sha256)
	}
	b.powerOff(context.WithoutCancel(ctx), t)
}

// TestVerityCorruption flips one byte of a file's data block in partition 1 of a copy of the verity
// image, boots it, and reads the file: the read must fail with EIO and the kernel must report the
// corrupted block, rather than the file coming back with the changed byte. A file beside it still
// reads, and the appliance stays up.
func TestVerityCorruption(t *testing.T) {
	a := needVerityAppliance(t)
	dir := t.TempDir()
	img := filepath.Join(dir, artifact.Rootfs)
	if out, err := exec.Command("cp", "--sparse=always", a.path(artifact.Rootfs), img).CombinedOutput(); err != nil {
		t.Fatalf("copy the image: %v\n%s", err, out)
	}
	if err := os.Symlink(a.path(artifact.Kernel), filepath.Join(dir, artifact.Kernel)); err != nil {
		t.Fatal(err)
	}
	probe := verityProbe(t, img)
	off := partitionStart(t, img) + probe.block*4096 + 100
	flipImageByte(t, img, off)
	t.Logf("flipped the byte at %d: block %d of partition 1, inside %s", off, probe.block, probe.path)

	corrupt := &built{dir: dir, info: a.info}
	ctx := testContext(t, 2*bootBudget)
	b := corrupt.boot(ctx, t, imageMode, blankDisk(t))
	b.waitReady(ctx, t)

	r := b.verityRun(ctx, t, "cat", probe.path)
	t.Logf("cat %s on the corrupted image: exit %d, %d bytes out, stderr %q", probe.path, r.exit, len(r.stdout), r.stderr)
	if r.exit == 0 || !strings.Contains(r.stderr, "Input/output error") {
		t.Errorf("cat %s: exit %d, stderr %q; want a failure with EIO (Input/output error)", probe.path, r.exit, r.stderr)
	}
	if len(r.stdout) >= 100 {
		t.Errorf("cat returned %d bytes of the file, past the corrupted byte at 100: dm-verity let bad data through", len(r.stdout))
	}
	line, err := b.WaitForLine(ctx, "is corrupted")
	if err != nil {
		t.Fatalf("the console never reported the corrupted block: %v", err)
	}
	t.Logf("console at %.3fs: %s", line.At.Seconds(), line.Text)
	want := fmt.Sprintf("data block %d is corrupted", probe.block)
	if !strings.Contains(line.Text, "device-mapper: verity:") || !strings.Contains(line.Text, want) {
		t.Errorf("console: %q; want device-mapper: verity: ... %s", line.Text, want)
	}
	if r := b.verityRun(ctx, t, "sha256sum", probe.other); r.exit != 0 {
		t.Errorf("sha256sum %s beside the corrupted file: exit %d, %s", probe.other, r.exit, r.stderr)
	}
	b.powerOff(context.WithoutCancel(ctx), t)
}

// TestVerityNvdimm boots the verity image the way Kata attaches it by default on x86_64
// (disable_image_nvdimm = false): as an NVDIMM behind its DAX header, with the dm-verity table over
// /dev/pmem0p1 and /dev/pmem0p2 and, as Kata's runtimes do with verity, no dax in rootflags.
func TestVerityNvdimm(t *testing.T) {
	a := needVerityAppliance(t)
	img := a.path(artifact.Rootfs)
	if !hasDAXHeader(t, img) {
		t.Fatalf("%s has no NVDIMM DAX header: the verity spec must keep kata.nvdimm = true as images/allox.hcl does", img)
	}
	root, err := kata.VerityCmdline(a.info.KernelVerityParams, kata.NvdimmData, kata.NvdimmHash, "ext4")
	if err != nil {
		t.Fatal(err)
	}
	opt := appliance.Options(a.dir, a.info, imageMode, blankDisk(t), newToken(t))
	opt.Disks = slices.DeleteFunc(opt.Disks, func(d vm.Disk) bool { return d.Path == img })
	opt.Cmdline = slices.Concat(a.info.Cmdline, []string{"loglevel=7"}, root)
	opt.ExtraArgs = append(opt.ExtraArgs, nvdimmArgs(t, img, opt.MemoryMiB)...)
	opt.Machine = "q35,nvdimm=on"
	ctx := testContext(t, 2*bootBudget)
	v, err := vm.Start(ctx, t, opt)
	if err != nil {
		t.Fatalf("boot: %v", err)
	}
	url := fmt.Sprintf("http://127.0.0.1:%d", v.HostPort(a.info.RPCPort))
	b := &booted{VM: v, app: a, url: url, token: opt.FwCfg[a.info.TokenFwCfg], rpc: newRPCClient(url, opt.FwCfg[a.info.TokenFwCfg])}
	b.waitReady(ctx, t)
	for _, want := range []string{"nd_pmem pfn", "EXT4-fs (dm-0)"} {
		if !b.consoleHas(want) {
			t.Errorf("console lacks %q: the root was not dm-verity over the NVDIMM", want)
		}
	}
	r := b.verityRun(ctx, t, "cat", "/proc/partitions")
	for _, want := range []string{" pmem0p1\n", " pmem0p2\n", " dm-0\n"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("/proc/partitions lacks %q:\n%s", strings.TrimSpace(want), r.stdout)
		}
	}
	b.powerOff(context.WithoutCancel(ctx), t)
}

// partitionStart reads where partition 1 starts from the image's (first) MBR: 1 MiB, or 3 MiB
// behind Kata's NVDIMM DAX header.
func partitionStart(t *testing.T, img string) int64 {
	t.Helper()
	f, err := os.Open(img)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	mbr := make([]byte, 512)
	if _, err := f.ReadAt(mbr, 0); err != nil {
		t.Fatal(err)
	}
	if mbr[510] != 0x55 || mbr[511] != 0xaa {
		t.Fatalf("%s has no MBR", img)
	}
	return int64(binary.LittleEndian.Uint32(mbr[446+8:])) * 512
}

func needVerityAppliance(t *testing.T) *built {
	t.Helper()
	a := needApplianceIn(t, imageMode, filepath.Join(outDir(), verityOut))
	needTool(t, "debugfs", "apt-get install e2fsprogs")
	params, err := os.ReadFile(a.path(artifact.VerityParams))
	if err != nil {
		t.Fatalf("the verity build has no %s: %v", artifact.VerityParams, err)
	}
	if got := strings.TrimSpace(string(params)); got == "" || got != a.info.KernelVerityParams {
		t.Fatalf("%s %q and boot.json's kernel_verity_params %q differ", artifact.VerityParams, got, a.info.KernelVerityParams)
	}
	if !slices.Contains(a.info.ImageCmdline, "root=/dev/dm-0") {
		t.Fatalf("boot.json image_cmdline %q does not boot through dm-verity", a.info.ImageCmdline)
	}
	return a
}

// probe is a file of the image read by the tests: its first data block and its sha256, read on the
// host with debugfs, and a second file beside it.
type probe struct {
	path, other string
	block       int64
	sha256      string
}

// verityProbe picks the first two files of verityProbeDir larger than one block, with debugfs.
func verityProbe(t *testing.T, img string) probe {
	t.Helper()
	var files []string
	for _, line := range strings.Split(debugfs(t, img, "ls -p "+verityProbeDir), "\n") {
		// /inode/mode/uid/gid/name/size/
		f := strings.Split(line, "/")
		if len(f) == 8 && strings.HasPrefix(f[2], "10") {
			if size, _ := strconv.Atoi(f[6]); size > 1024 {
				files = append(files, verityProbeDir+"/"+f[5])
			}
		}
	}
	slices.Sort(files)
	if len(files) < 2 {
		t.Fatalf("%s holds %d files larger than 1 KiB; the test needs two", verityProbeDir, len(files))
	}
	p := probe{path: files[0], other: files[1]}
	block, err := strconv.ParseInt(strings.TrimSpace(debugfs(t, img, "bmap "+p.path+" 0")), 10, 64)
	if err != nil || block == 0 {
		t.Fatalf("debugfs bmap %s 0: %v", p.path, err)
	}
	p.block = block
	sum := sha256.Sum256([]byte(debugfs(t, img, "cat "+p.path)))
	p.sha256 = hex.EncodeToString(sum[:])
	return p
}

// debugfs runs one read-only debugfs request against partition 1 of img.
func debugfs(t *testing.T, img, request string) string {
	t.Helper()
	cmd := exec.Command("debugfs", "-R", request, fmt.Sprintf("%s?offset=%d", img, partitionStart(t, img)))
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("debugfs -R %q %s: %v", request, img, err)
	}
	return string(out)
}

func flipImageByte(t *testing.T, img string, off int64) {
	t.Helper()
	f, err := os.OpenFile(img, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x20
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// mountOf returns the mountinfo line whose mount point is dir.
func mountOf(mountinfo, dir string) string {
	for _, line := range strings.Split(mountinfo, "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == dir {
			return line
		}
	}
	return ""
}

// runResult is a finished run's exit code and output.
type runResult struct {
	exit           int
	stdout, stderr string
}

// verityRun runs argv through process.start in a session of its own agent (created on first use),
// waits for it and returns its exit code and both streams.
func (b *booted) verityRun(ctx context.Context, t *testing.T, argv ...string) runResult {
	t.Helper()
	ids := map[string]any{"agent_id": "verity", "session_id": "s1"}
	if err := b.rpc.Call(ctx, rpc.ActionSessionGet, ids, nil); err != nil {
		b.call(ctx, t, rpc.ActionAgentCreate, map[string]any{"agent_id": "verity"})
		b.call(ctx, t, rpc.ActionSessionCreate, ids)
	}
	var r rpc.Run
	b.call(ctx, t, rpc.ActionProcessStart, map[string]any{"agent_id": "verity", "session_id": "s1", "argv": argv}, &r)
	b.call(ctx, t, rpc.ActionProcessWait, map[string]any{"run_id": r.RunID}, &r)
	if r.ExitCode == nil {
		t.Fatalf("%v ended without an exit code: %+v", argv, r)
	}
	res := runResult{exit: *r.ExitCode}
	for stream, dst := range map[string]*string{"stdout": &res.stdout, "stderr": &res.stderr} {
		var out rpc.Output
		b.call(ctx, t, rpc.ActionProcessOutput, map[string]any{"run_id": r.RunID, "stream": stream}, &out)
		*dst = out.Data
	}
	return res
}

func (b *booted) call(ctx context.Context, t *testing.T, action string, params map[string]any, res ...any) {
	t.Helper()
	var dst any
	if len(res) > 0 {
		dst = res[0]
	}
	if err := b.rpc.Call(ctx, action, params, dst); err != nil {
		t.Fatalf("%s %v: %v", action, params, err)
	}
}
