package boot

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"

	"github.com/allox-os/allox/internal/manifest"
)

// FwCfgDir is where the kernel (CONFIG_FW_CFG_SYSFS) exposes QEMU's fw_cfg blobs by name.
const FwCfgDir = "/sys/firmware/qemu_fw_cfg/by_name"

// DefaultFwCfgMode applies when the manifest gives mode 0: blobs are usually secrets.
const DefaultFwCfgMode = 0o600

// FwCfg copies one fw_cfg blob into a file.
type FwCfg struct{ manifest.FwCfg }

func (f FwCfg) String() string {
	return fmt.Sprintf("fw_cfg %s -> %s (%04o)", f.Name, f.Path, f.mode())
}

func (f FwCfg) mode() fs.FileMode {
	if f.Mode == 0 {
		return DefaultFwCfgMode
	}
	return fs.FileMode(f.Mode).Perm()
}

// Run writes the blob through a temporary file and a rename, so a reader never sees half of it.
// A missing blob (the host passed none) is skipped.
func (f FwCfg) Run(_ context.Context, sys *Sys) error {
	src, err := os.Open(sys.Path(path.Join(FwCfgDir, f.Name, "raw")))
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: no fw_cfg blob %q (start QEMU with -fw_cfg name=%s,file=...)", ErrSkipped, f.Name, f.Name)
	}
	if err != nil {
		return err
	}
	defer src.Close()
	dst := sys.Path(f.Path)
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return err
	}
	tmp, err := os.OpenFile(dst+".tmp", os.O_WRONLY|os.O_CREATE|os.O_TRUNC, f.mode())
	if err != nil {
		return err
	}
	_, err = io.Copy(tmp, src)
	if err == nil {
		err = tmp.Chmod(f.mode())
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(dst+".tmp", dst)
	}
	if err != nil {
		os.Remove(dst + ".tmp")
		return fmt.Errorf("copy to %s: %w", f.Path, err)
	}
	return nil
}
