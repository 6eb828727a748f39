package spec

import "github.com/hashicorp/hcl/v2"

var kataSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "boot_mode"},
		{Name: "rootfs_type"},
		{Name: "kernel_params"},
		{Name: "nvdimm"},
		{Name: "enable_annotations"},
		{Name: "block_device_driver"},
		{Name: "require_agent"},
	},
	Blocks: []hcl.BlockHeaderSchema{{Type: "agent"}},
}

var agentSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "binary"},
		{Name: "from_image"},
		{Name: "max_restarts"},
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
	attr(d, c, "kata", "block_device_driver", &k.BlockDeviceDriver)
	attr(d, c, "kata", "require_agent", &k.RequireAgent)
	if ab := d.block(c, b.Body, "kata.agent", "agent", false); ab != nil {
		const key = "kata.agent"
		k.Agent = &KataAgent{MaxRestarts: DefaultAgentRestarts}
		ac := d.content(key, ab.Body, agentSchema)
		attr(d, ac, key, "binary", &k.Agent.Binary)
		attr(d, ac, key, "from_image", &k.Agent.FromImage)
		attr(d, ac, key, "max_restarts", &k.Agent.MaxRestarts)
	}
}
