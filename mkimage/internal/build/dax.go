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
	if !k.Nvdimm || k.BootMode != spec.BootImage {
		return nil
	}
	opt := dax.Options{Seed: []byte(s.fsID("nvdimm pfn uuid"))}
	return dax.AddHeader(filepath.Join(s.out, artifact.Rootfs), opt)
}
