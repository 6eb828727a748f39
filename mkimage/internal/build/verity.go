package build

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/allox-os/allox/deploy/kata"
	"github.com/allox-os/allox/internal/artifact"
)

// writeVerityParams writes the rootfs hash tree's kernel_verity_params, one line in Kata's format, to
// the output directory, where platform teams copy it from; without verity it removes a stale one.
func (s *state) writeVerityParams() error {
	p := filepath.Join(s.out, artifact.VerityParams)
	if s.verity == nil {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}
	tmp := filepath.Join(s.work, artifact.VerityParams)
	if err := os.WriteFile(tmp, []byte(s.verity.String()+"\n"), 0o644); err != nil {
		return err
	}
	return s.place(tmp, artifact.VerityParams)
}

// kernelVerityParams is the image's kernel_verity_params, "" without verity.
func (s *state) kernelVerityParams() string {
	if s.verity == nil {
		return ""
	}
	return s.verity.String()
}

// imageCmdline is what Kata's runtime puts on the command line for the image attached as virtio-blk
// (/dev/vda, disable_image_nvdimm = true, as the drop-ins ask): the root partition mounted read-only,
// or, with verity, the dm-verity device over partitions 1 and 2.
func (s *state) imageCmdline() ([]string, error) {
	fsType := s.opt.Spec.Rootfs.Filesystem
	if s.verity == nil {
		return []string{"root=" + kata.VirtioBlkData, "rootflags=data=ordered,errors=remount-ro", "ro", "rootfstype=" + fsType}, nil
	}
	return kata.VerityCmdline(s.verity.String(), kata.VirtioBlkData, kata.VirtioBlkHash, fsType)
}
