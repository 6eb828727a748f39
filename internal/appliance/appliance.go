// Package appliance turns a built output directory into QEMU options the way Kata starts the guest,
// for the QEMU tests, the bench, `make boot` and the Probe's QEMU runtime (deploy/probe).
package appliance

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"

	"github.com/allox-os/allox/internal/artifact"
	"github.com/allox-os/allox/internal/marker"
	"github.com/allox-os/allox/internal/vm"
)

// Mode is how the appliance boots.
type Mode int

const (
	Image  Mode = iota // bzImage + rootfs.img as read-only /dev/vda, Cmdline + ImageCmdline
	Initrd             // bzImage + initramfs.cpio.gz, Cmdline only
)

func (m Mode) String() string { return [...]string{"image", "initrd"}[m] }

// Options boots the artifacts in dir in mode m. workspace is a raw disk for the store ("" for none,
// which makes init fall back to a RAM-backed Btrfs); token is handed to the guest through fw_cfg.
func Options(dir string, info *artifact.BootInfo, m Mode, workspace, token string) vm.Options {
	opt := vm.Options{
		Kernel:    filepath.Join(dir, artifact.Kernel),
		Cmdline:   slices.Clone(info.Cmdline),
		MemoryMiB: info.MemoryMiB,
		FwCfg:     map[string]string{info.TokenFwCfg: token},
		HostFwd:   map[int]int{info.RPCPort: 0},
	}
	switch m {
	case Image:
		opt.Cmdline = append(opt.Cmdline, info.ImageCmdline...)
		opt.Disks = []vm.Disk{{Path: filepath.Join(dir, artifact.Rootfs), ReadOnly: true}}
	case Initrd:
		opt.Initrd = filepath.Join(dir, artifact.Initramfs)
	}
	if workspace != "" {
		opt.Disks = append(opt.Disks, vm.Disk{Path: workspace, Serial: info.StoreSerial})
	}
	return opt
}

// WaitReady waits until v's init has booted and every ready service of info reported ready, and
// returns the latest of those console lines.
func WaitReady(ctx context.Context, v *vm.VM, info *artifact.BootInfo) (vm.Line, error) {
	last, err := v.WaitForLine(ctx, marker.BootDone)
	if err != nil {
		return last, err
	}
	for _, s := range info.ReadyServices {
		l, err := v.WaitForLine(ctx, marker.Ready(s))
		if err != nil {
			return last, err
		}
		if l.At > last.At {
			last = l
		}
	}
	return last, nil
}

// EnsureDisk creates path as a sparse raw disk of size bytes unless it exists (a store disk).
func EnsureDisk(path string, size int64) error {
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	return errors.Join(f.Truncate(size), f.Close())
}
