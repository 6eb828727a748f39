package katacheck

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/BurntSushi/toml"

	"github.com/allox-os/allox/deploy/kata"
	"github.com/allox-os/allox/internal/artifact"
)

// Target is what the rules check: the artifacts and the Kata settings the drop-in gives them.
type Target struct {
	Image        string // image mode: the disk image (rootfs.img); "" in initrd mode
	Initrd       string // initrd mode: the gzip'd newc cpio; "" in image mode
	KernelConfig string // the kernel's final .config
	RootfsType   string // Kata's rootfs_type: how the runtime mounts partition 1 (default "ext4")
	Nvdimm       bool   // image attached as an NVDIMM: disable_image_nvdimm is false (Kata's default)
	Verity       bool   // kernel_verity_params is set: partition 2 holds the dm-verity hash tree
	RequireAgent bool   // boot.json's require_agent: the spec is for Kata, a missing agent fails
	// BlockDeviceDriver is block_device_driver, how Kata attaches block devices (container root
	// filesystems, volumes): "" or "virtio-scsi" (Kata's default), or "virtio-blk".
	BlockDeviceDriver string

	layout *layout // read once
	lerr   error
	tree   fileTree
	terr   error
}

// dropIn is the part of the Go runtime's drop-in the rules need.
type dropIn struct {
	Hypervisor struct {
		QEMU struct {
			Image              string `toml:"image"`
			Initrd             string `toml:"initrd"`
			RootfsType         string `toml:"rootfs_type"`
			DisableImageNvdimm *bool  `toml:"disable_image_nvdimm"`
			KernelVerityParams string `toml:"kernel_verity_params"`
			BlockDeviceDriver  string `toml:"block_device_driver"`
		} `toml:"qemu"`
	} `toml:"hypervisor"`
}

// Load reads the Go runtime's drop-in in dir (kata/config.d/50-allox.toml) for the settings and
// names the artifacts beside it.
func Load(dir string) (*Target, error) {
	p := filepath.Join(dir, artifact.KataDir, filepath.FromSlash(kata.GoRuntimeDropIn))
	var d dropIn
	if _, err := toml.DecodeFile(p, &d); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%w (build the image first: mkimage build)", err)
		}
		return nil, fmt.Errorf("drop-in %s: %w", p, err)
	}
	q := d.Hypervisor.QEMU
	t := &Target{KernelConfig: filepath.Join(dir, artifact.KernelConfig), RootfsType: q.RootfsType,
		Verity: q.KernelVerityParams != "", BlockDeviceDriver: q.BlockDeviceDriver}
	switch {
	case q.Image != "" && q.Initrd != "":
		return nil, fmt.Errorf("%s sets both image and initrd; Kata refuses to start: set one to \"\"", p)
	case q.Image != "":
		t.Image = filepath.Join(dir, artifact.Rootfs)
		t.Nvdimm = q.DisableImageNvdimm == nil || !*q.DisableImageNvdimm
	case q.Initrd != "":
		t.Initrd = filepath.Join(dir, artifact.Initramfs)
	default:
		return nil, fmt.Errorf("%s sets neither image nor initrd: Kata needs one", p)
	}
	if t.RootfsType == "" {
		t.RootfsType = "ext4" // Kata's default
	}
	if bi, err := artifact.ReadBootInfo(dir); err == nil { // an older build has none: not required
		t.RequireAgent = bi.RequireAgent
	}
	return t, nil
}

func (t *Target) imageMode() bool { return t.Image != "" }

func (t *Target) describe() string {
	if !t.imageMode() {
		return "an initrd"
	}
	s := "an image attached as virtio-blk"
	if t.Nvdimm {
		s = "an image attached as an NVDIMM"
	}
	if t.Verity {
		s += " with dm-verity"
	}
	return s
}
