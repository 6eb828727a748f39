package build

import (
	"context"
	"path/filepath"

	"github.com/allox-os/allox/internal/artifact"
	"github.com/allox-os/allox/mkimage/internal/spec"
	"github.com/allox-os/allox/rootfs/dax"
)

// writeDAXHeader puts Kata's 2 MiB NVDIMM DAX header in front of rootfs.img when the spec says
// kata.nvdimm = true, padding the image to a multiple of 128 MiB as Kata's image builder does. The
// info block's uuid is derived from the spec, so the same spec gives the same bytes.
func writeDAXHeader(ctx context.Context, s *state) error {
	k := s.opt.Spec.Kata
	if s.tree == nil || !s.needDisk() {
		s.reused("the disk was not rewritten")
		return nil
	}
	disk := filepath.Join(s.out, artifact.Rootfs)
	if k.Nvdimm && k.BootMode == spec.BootImage {
		s.ran("the disk was rewritten")
		opt := dax.Options{Seed: []byte(s.fsID("nvdimm pfn uuid"))}
		if err := dax.AddHeader(disk, opt); err != nil {
			return err
		}
	} else {
		s.reused("the spec asks for no header (kata.nvdimm)")
	}
	_, err := s.hash(disk) // the disk is final: its stamp and sha256 go into the cache
	return err
}
