package spec

import "github.com/hashicorp/hcl/v2"

var kataSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "boot_mode"},
		{Name: "rootfs_type"},
		{Name: "kernel_params"},
		{Name: "nvdimm"},
		{Name: "enable_annotations"},
	},
}

// decodeKata decodes the kata block over the defaults already in k.
func (d *decoder) decodeKata(b *hcl.Block, k *Kata) {
	c := d.content("kata", b.Body, kataSchema)
	attr(d, c, "kata", "boot_mode", &k.BootMode)
	attr(d, c, "kata", "rootfs_type", &k.RootfsType)
	attr(d, c, "kata", "kernel_params", &k.KernelParams)
	attr(d, c, "kata", "nvdimm", &k.Nvdimm)
	attr(d, c, "kata", "enable_annotations", &k.EnableAnnotations)
}
