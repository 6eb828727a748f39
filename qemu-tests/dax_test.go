package qemutests

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/allox-os/allox/internal/appliance"
	"github.com/allox-os/allox/internal/artifact"
	"github.com/allox-os/allox/internal/vm"
	"github.com/allox-os/allox/rootfs/dax"
)

// The NVDIMM tests boot the image the way Kata attaches it on x86_64 with disable_image_nvdimm =
// false (govmm appendNvdimmImage and Object.QemuParams): q35 with nvdimm=on, memory hotplug slots,
// the image as a read-only memory-backend-file behind an unarmed nvdimm device, and the root on
// /dev/pmem0p1 mounted with dax.

// TestNvdimmDAXBoot boots the image with its DAX header as an NVDIMM: the kernel must accept the
// PFN info block (an nd_pmem pfn device, not a raw namespace) and mount partition 1 with DAX.
func TestNvdimmDAXBoot(t *testing.T) {
	a := needAppliance(t, imageMode)
	img := daxImage(t, a)
	ctx := testContext(t, bootBudget)
	b := bootImage(ctx, t, a, img, true)
	b.waitReady(ctx, t)
	for _, want := range []string{"nd_pmem pfn", "EXT4-fs (pmem0p1)"} {
		if !b.consoleHas(want) {
			t.Errorf("console lacks %q: the PFN info block was not used for the root", want)
		}
	}
	b.checkSystemInfo(ctx, t)
	b.powerOff(ctx, t)
}

// TestNvdimmImageAsVirtioBlk boots the same headed image as a virtio-blk disk (disable_image_nvdimm
// = true): MBR #1 must point at the filesystem 3 MiB in, /dev/vda1.
func TestNvdimmImageAsVirtioBlk(t *testing.T) {
	a := needAppliance(t, imageMode)
	img := daxImage(t, a)
	ctx := testContext(t, bootBudget)
	b := bootImage(ctx, t, a, img, false)
	b.waitReady(ctx, t)
	if !b.consoleHas("EXT4-fs (vda1)") {
		t.Errorf("console lacks %q: the root was not mounted from /dev/vda1", "EXT4-fs (vda1)")
	}
	b.powerOff(ctx, t)
}

// TestNvdimmWithoutHeaderPanics is the control: the same image without its header, as an NVDIMM,
// must fail the way Kata users see it, so the header is what makes TestNvdimmDAXBoot pass.
func TestNvdimmWithoutHeaderPanics(t *testing.T) {
	a := needAppliance(t, imageMode)
	plain := plainImage(t, daxImage(t, a))
	ctx := testContext(t, bootBudget)
	b := bootImage(ctx, t, a, plain, true)
	if _, err := b.WaitFor(ctx, "DAX unsupported by block device"); err != nil {
		t.Fatal(err)
	}
	if err := b.Wait(); err == nil && !b.consoleHas("Kernel panic") {
		t.Error("the guest went on without a root filesystem; want a panic")
	}
}

// daxImage is the appliance's rootfs.img with a DAX header: as built when the spec says
// kata.nvdimm = true, or else a copy with the header added here.
func daxImage(t *testing.T, a *built) string {
	t.Helper()
	src := a.path(artifact.Rootfs)
	if hasDAXHeader(t, src) {
		return src
	}
	dst := filepath.Join(t.TempDir(), "rootfs-dax.img")
	if err := dax.WrapFile(dst, src, dax.Options{Seed: []byte("qemu-tests")}); err != nil {
		t.Fatal(err)
	}
	return dst
}

func hasDAXHeader(t *testing.T, path string) bool {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	_, err = dax.Read(f, st.Size())
	switch {
	case err == nil:
		return true
	case errors.Is(err, dax.ErrNoInfo):
		return false
	}
	t.Fatalf("%s has a broken DAX header: %v", path, err)
	return false
}

// plainImage copies the original image back out from behind the header (with the zero padding).
func plainImage(t *testing.T, headed string) string {
	t.Helper()
	in, err := os.Open(headed)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	dst := filepath.Join(t.TempDir(), "rootfs-plain.img")
	out, err := os.Create(dst)
	if err == nil {
		_, err = io.Copy(out, io.NewSectionReader(in, dax.HeaderSize, 1<<40))
		err = errors.Join(err, out.Close())
	}
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

// bootImage boots img as Kata would: as an NVDIMM with root=/dev/pmem0p1 and dax, or as a
// read-only virtio-blk disk with root=/dev/vda1. The workspace store is a blank disk.
func bootImage(ctx context.Context, t *testing.T, a *built, img string, nvdimm bool) *booted {
	t.Helper()
	token := newToken(t)
	opt := appliance.Options(a.dir, a.info, imageMode, blankDisk(t), token)
	rootfs := a.path(artifact.Rootfs)
	opt.Disks = slices.DeleteFunc(opt.Disks, func(d vm.Disk) bool { return d.Path == rootfs })
	// loglevel=7 after the spec's quiet lets the driver's and ext4's info lines through to the
	// console, where the tests look for them; it changes nothing else.
	opt.Cmdline = append(slices.Clone(a.info.Cmdline), "loglevel=7")
	if nvdimm {
		opt.Cmdline = append(opt.Cmdline, nvdimmCmdline(a.info.ImageCmdline)...)
		opt.ExtraArgs = append(opt.ExtraArgs, nvdimmArgs(t, img, opt.MemoryMiB)...)
		opt.Machine = "q35,nvdimm=on"
	} else {
		opt.Cmdline = append(opt.Cmdline, a.info.ImageCmdline...)
		opt.Disks = append([]vm.Disk{{Path: img, ReadOnly: true}}, opt.Disks...)
	}
	v, err := vm.Start(ctx, t, opt)
	if err != nil {
		t.Fatalf("boot: %v", err)
	}
	url := fmt.Sprintf("http://127.0.0.1:%d", v.HostPort(a.info.RPCPort))
	return &booted{VM: v, app: a, url: url, token: token, rpc: newRPCClient(url, token)}
}

// nvdimmCmdline turns the virtio-blk root parameters into Kata's NVDIMM ones
// (GetKernelRootParams): root=/dev/pmem0p1 and "dax," in front of the ext4 rootflags.
func nvdimmCmdline(image []string) []string {
	out := make([]string, 0, len(image))
	for _, p := range image {
		switch {
		case strings.HasPrefix(p, "root="):
			p = "root=/dev/pmem0p1"
		case strings.HasPrefix(p, "rootflags="):
			p = "rootflags=dax," + strings.TrimPrefix(p, "rootflags=")
		}
		out = append(out, p)
	}
	return out
}

// nvdimmArgs are Kata's NVDIMM devices. The second -m merges into the harness's own (QEMU merges
// repeated -m options) to add the hotplug slots and maxmem an NVDIMM needs; Kata reserves 1 GiB of
// maxmem beyond the guest's memory for the image.
func nvdimmArgs(t *testing.T, img string, memMiB int) []string {
	st, err := os.Stat(img)
	if err != nil {
		t.Fatal(err)
	}
	maxMiB := memMiB + 1024 + int(st.Size()>>20)
	return []string{
		"-m", fmt.Sprintf("%dM,slots=10,maxmem=%dM", memMiB, maxMiB),
		"-object", fmt.Sprintf("memory-backend-file,id=mem0,mem-path=%s,size=%d,readonly=on",
			strings.ReplaceAll(img, ",", ",,"), st.Size()),
		"-device", "nvdimm,id=nv0,memdev=mem0,unarmed=on",
	}
}
