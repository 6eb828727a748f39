package boot

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/allox-os/allox/internal/manifest"
	"github.com/allox-os/allox/internal/marker"
	"golang.org/x/sys/unix"
)

const (
	// FallbackImage is the sparse file behind the RAM-backed store (on the /run tmpfs).
	FallbackImage = "/run/allox/store.img"
	// DefaultFallbackMiB applies when the manifest gives no size.
	DefaultFallbackMiB = 512
	minFallbackMiB     = 64
	// Below 1 GiB mkfs.btrfs gets --mixed (data and metadata share block groups), as btrfs-progs
	// recommends for small filesystems; without it mkfs refuses devices under 114 MiB.
	mixedBelow   = 1 << 30
	storeFlags   = unix.MS_NOATIME
	mkfsDeadline = 5 * time.Minute
)

// Store mounts the Btrfs workspace store: the virtio disk with the manifest's serial (formatted
// if blank, refused if it holds anything but Btrfs) or else a RAM-backed Btrfs on a loop device.
type Store struct{ manifest.Store }

func (s Store) String() string {
	return fmt.Sprintf("store serial=%s -> %s (btrfs label=%s, RAM fallback %d MiB)",
		s.Serial, s.Mountpoint, s.Label, fallbackMiB(s.FallbackSizeMiB))
}

// Run mounts the store at its mount point, which must exist in a read-only image.
func (s Store) Run(ctx context.Context, sys *Sys) error {
	mp := sys.Path(s.Mountpoint)
	if err := os.MkdirAll(mp, 0o755); err != nil {
		return fmt.Errorf("create mount point: %w (on a read-only root the image must contain %s)", err, s.Mountpoint)
	}
	ctx, cancel := context.WithTimeout(ctx, mkfsDeadline)
	defer cancel()
	dev, err := s.waitDisk(ctx, sys)
	if errors.Is(err, errNoDisk) {
		return s.fallback(ctx, sys, mp, err)
	}
	if err != nil {
		return err
	}
	return s.disk(ctx, sys, dev, mp)
}

func (s Store) waitDisk(ctx context.Context, sys *Sys) (string, error) {
	if s.Serial == "" {
		return "", fmt.Errorf("%w: the manifest names no store.serial", errNoDisk)
	}
	deadline := time.Now().Add(sys.StoreWait)
	for {
		dev, err := FindDisk(sys, s.Serial)
		if !errors.Is(err, errNoDisk) || time.Now().After(deadline) {
			return dev, err
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (s Store) disk(ctx context.Context, sys *Sys, dev, mp string) error {
	path := sys.Path(dev)
	p, err := ProbeFile(path)
	if err != nil {
		return fmt.Errorf("probe %s: %w", dev, err)
	}
	switch p.Content {
	case Other:
		return fmt.Errorf("%s (serial %s) holds %s, not Btrfs: refusing to format it; "+
			"attach a blank disk (e.g. qemu-img create -f raw ws.img 20G) or one with a Btrfs filesystem",
			dev, s.Serial, p.Looks)
	case Blank:
		if err := sys.Mkfs(ctx, path, s.Label, p.Size < mixedBelow); err != nil {
			return fmt.Errorf("format blank %s: %w", dev, err)
		}
	}
	return mountStore(sys, path, mp)
}

func (s Store) fallback(ctx context.Context, sys *Sys, mp string, why error) error {
	mib := fallbackMiB(s.FallbackSizeMiB)
	sys.notify(Notice{
		Marker:  fmt.Sprintf("%s serial=%s size_mib=%d", marker.StoreFallback, s.Serial, mib),
		Message: "no workspace disk: using a RAM-backed Btrfs store; its data is lost at power-off",
		Attrs:   []any{"serial", s.Serial, "size_mib", mib, "reason", why.Error()},
	})
	file := sys.Path(FallbackImage)
	if err := sparseFile(file, int64(mib)<<20); err != nil {
		return err
	}
	dev, release, err := sys.Loop(file)
	if err != nil {
		return fmt.Errorf("attach %s to a loop device: %w", FallbackImage, err)
	}
	err = sys.Mkfs(ctx, dev, s.Label, int64(mib)<<20 < mixedBelow)
	if err == nil {
		err = mountStore(sys, dev, mp)
	}
	if rerr := release(); err == nil && rerr != nil {
		err = fmt.Errorf("release %s: %w", dev, rerr)
	}
	return err
}

func fallbackMiB(mib int) int {
	if mib <= 0 {
		return DefaultFallbackMiB
	}
	return max(mib, minFallbackMiB)
}

func sparseFile(path string, size int64) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	err = f.Truncate(size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func mountStore(sys *Sys, dev, mp string) error {
	if err := sys.Mount(dev, mp, "btrfs", storeFlags, ""); err != nil {
		return fmt.Errorf("mount %s on %s: %w", dev, mp, err)
	}
	sys.mounted(mp)
	return nil
}
