package build

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strconv"

	"github.com/allox-os/allox/deploy/kata"
	"github.com/allox-os/allox/initramfs"
	"github.com/allox-os/allox/internal/artifact"
	"github.com/allox-os/allox/mkimage/internal/spec"
)

// InstallDir is where a platform team installs the artifacts on a Kata host, one directory per
// release below it; the drop-ins name the release's.
func InstallDir(img *spec.Image) string { return "/opt/allox/" + img.Name }

func writeKata(ctx context.Context, s *state) error {
	img := s.opt.Spec
	a := kata.Assets{RootfsType: img.Kata.RootfsType, KernelParams: img.Kata.KernelParams,
		EnableAnnotations: img.Kata.EnableAnnotations, BlockDeviceDriver: img.Kata.BlockDeviceDriver}
	artifacts := []string{artifact.Kernel, artifact.Rootfs}
	if img.Kata.BootMode == spec.BootInitrd {
		artifacts[1] = artifact.Initramfs
	}
	// The artifacts install into a directory of their own per release, named by their contents, so
	// that install.sh can put a new release beside the one the installed drop-ins name.
	var paths []string
	for _, name := range artifacts {
		paths = append(paths, filepath.Join(s.out, name))
	}
	release, err := kata.ReleaseOfHashed(s.hash, paths...)
	if err != nil {
		return err
	}
	dir := InstallDir(img) + "/" + release
	a.Kernel = dir + "/" + artifact.Kernel
	if img.Kata.BootMode == spec.BootInitrd {
		st, err := os.Stat(filepath.Join(s.out, artifact.Initramfs))
		if err != nil {
			return err
		}
		a.Initrd, a.InitrdBytes, a.RootfsType = dir+"/"+artifact.Initramfs, st.Size(), ""
		a.DefaultMemoryMiB = s.memoryMiB()
	} else {
		a.Image = dir + "/" + artifact.Rootfs
		a.KernelVerityParams = s.kernelVerityParams()
		// Without the NVDIMM DAX header (kata.nvdimm) the image must be attached as virtio-blk
		// (/dev/vda1): as an NVDIMM the guest would panic, "DAX unsupported by block device".
		a.DisableImageNvdimm = !img.Kata.Nvdimm
	}
	// The drop-ins, the containerd handlers, the RuntimeClasses and install.sh.
	files, err := kata.RenderDeployment(kata.Deployment{Name: img.Name, Release: release, Assets: a})
	if err != nil {
		return err
	}
	var wrote []string
	for _, f := range files {
		p := filepath.Join(s.out, artifact.KataDir, filepath.FromSlash(f.Name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		mode := os.FileMode(0o644)
		if f.Executable {
			mode = 0o755
		}
		changed, err := writeIfChanged(p, f.Data, mode)
		if err != nil {
			return err
		}
		if changed {
			wrote = append(wrote, f.Name)
		}
	}
	if len(wrote) == 0 {
		s.reused("release %s: all %d files unchanged", release, len(files))
	} else {
		s.ran("release %s: wrote %d of %d files", release, len(wrote), len(files))
	}
	return nil
}

// memoryMiB is the guest memory initrd mode needs: the unpacked rootfs lives in RAM, plus room for
// the kernel, the page cache and the services. It is computed once per build.
func (s *state) memoryMiB() int {
	if s.memMiB == 0 {
		s.memMiB = treeMemoryMiB(s.tree)
	}
	return s.memMiB
}

func treeMemoryMiB(tree *initramfs.Tree) int {
	var bytes int64
	for _, e := range tree.Entries() {
		switch {
		case e.Data != nil:
			bytes += int64(len(e.Data))
		case e.Source != "":
			if st, err := os.Stat(e.Source); err == nil {
				bytes += st.Size()
			}
		}
	}
	return max(1024, int(2*bytes>>20)+512)
}

func writeBootInfo(ctx context.Context, s *state) error {
	img := s.opt.Spec
	imageCmdline, err := s.imageCmdline()
	if err != nil {
		return err
	}
	bi := artifact.BootInfo{
		Cmdline:            img.Kernel.Cmdline,
		ImageCmdline:       imageCmdline,
		StoreSerial:        img.Init.Store.Serial,
		MemoryMiB:          s.memoryMiB(),
		KernelVerityParams: s.kernelVerityParams(),
		Nvdimm:             img.Kata.Nvdimm && img.Kata.BootMode == spec.BootImage,
	}
	bi.RPCPort, bi.TokenFwCfg = hostListener(img)
	if a := s.agentRecord(); a != nil {
		bi.KataAgent = &artifact.KataAgent{Path: a.Path, Version: a.Version, MaxRestarts: a.MaxRestarts}
	}
	bi.RequireAgent = img.Kata.RequireAgent
	for _, svc := range img.Services {
		if svc.Ready != nil {
			bi.ReadyServices = append(bi.ReadyServices, svc.Name)
		}
	}
	data, err := json.MarshalIndent(bi, "", "  ")
	if err != nil {
		return err
	}
	changed, err := writeIfChanged(filepath.Join(s.out, artifact.Boot), append(data, '\n'), 0o644)
	if changed {
		s.ran("wrote %s", artifact.Boot)
	} else {
		s.reused("%s unchanged", artifact.Boot)
	}
	return err
}

// hostListener finds the daemon's token-protected host listener in the service commands
// (--listen-host ADDR --token-file PATH) and the fw_cfg entry that delivers that token.
func hostListener(img *spec.Image) (port int, fwcfg string) {
	for _, svc := range img.Services {
		args := flagValues(svc.Command)
		addr, tokenFile := args["--listen-host"], args["--token-file"]
		if addr == "" || tokenFile == "" {
			continue
		}
		_, p, err := net.SplitHostPort(addr)
		if err != nil {
			continue
		}
		port, _ = strconv.Atoi(p)
		for _, f := range img.Init.FwCfg {
			if f.Path == tokenFile {
				return port, f.Name
			}
		}
		return port, ""
	}
	return 0, ""
}

func flagValues(argv []string) map[string]string {
	m := map[string]string{}
	for i := 1; i+1 < len(argv); i++ {
		m[argv[i]] = argv[i+1]
	}
	return m
}
