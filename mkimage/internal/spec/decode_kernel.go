package spec

import "github.com/hashicorp/hcl/v2"

var kernelSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "base", Required: true},
		{Name: "fragments"},
		{Name: "patches"},
		{Name: "allowlist"},
		{Name: "cmdline"},
	},
	Blocks: []hcl.BlockHeaderSchema{{Type: "source"}, {Type: "kata_parity"}},
}

var kataParitySchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "symbols", Required: true},
		{Name: "allowlist", Required: true},
	},
}

var kernelSourceSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "debian_package"},
		{Name: "version"},
		{Name: "tarball"},
		{Name: "sha256", Required: true},
	},
}

// decodeKernel decodes the kernel block. Paths stay as written until resolve.
func (d *decoder) decodeKernel(b *hcl.Block, k *Kernel) {
	c := d.content("kernel", b.Body, kernelSchema)
	if sb := d.block(c, b.Body, "kernel.source", "source", true); sb != nil {
		sc := d.content("kernel.source", sb.Body, kernelSourceSchema)
		attr(d, sc, "kernel.source", "debian_package", &k.Source.DebianPackage)
		attr(d, sc, "kernel.source", "version", &k.Source.Version)
		attr(d, sc, "kernel.source", "tarball", &k.Source.Tarball)
		attr(d, sc, "kernel.source", "sha256", &k.Source.SHA256)
	}
	if pb := d.block(c, b.Body, "kernel.kata_parity", "kata_parity", false); pb != nil {
		pc := d.content("kernel.kata_parity", pb.Body, kataParitySchema)
		k.KataParity = &KataParity{}
		attr(d, pc, "kernel.kata_parity", "symbols", &k.KataParity.Symbols)
		attr(d, pc, "kernel.kata_parity", "allowlist", &k.KataParity.Allowlist)
	}
	attr(d, c, "kernel", "base", &k.Base)
	attr(d, c, "kernel", "fragments", &k.Fragments)
	attr(d, c, "kernel", "patches", &k.Patches)
	attr(d, c, "kernel", "allowlist", &k.Allowlist)
	attr(d, c, "kernel", "cmdline", &k.Cmdline)
}
