package spec

import (
	"fmt"

	"github.com/hashicorp/hcl/v2"
)

var rootfsSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "suite"},
		{Name: "packages"},
		{Name: "filesystem"},
		{Name: "size_mib"},
		{Name: "verity"},
	},
	Blocks: []hcl.BlockHeaderSchema{{Type: "npm", LabelNames: []string{"name"}}},
}

// decodeRootfs decodes the rootfs block over the defaults already in r.
func (d *decoder) decodeRootfs(b *hcl.Block, r *Rootfs) {
	c := d.content("rootfs", b.Body, rootfsSchema)
	attr(d, c, "rootfs", "suite", &r.Suite)
	attr(d, c, "rootfs", "packages", &r.Packages)
	attr(d, c, "rootfs", "filesystem", &r.Filesystem)
	attr(d, c, "rootfs", "size_mib", &r.SizeMiB)
	attr(d, c, "rootfs", "verity", &r.Verity)
	for i, nb := range c.Blocks.OfType("npm") {
		r.Npm = append(r.Npm, d.decodeNpm(fmt.Sprintf("rootfs.npm.%d", i), nb))
	}
}
