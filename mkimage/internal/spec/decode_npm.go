package spec

import "github.com/hashicorp/hcl/v2"

var npmSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "package", Required: true},
		{Name: "version", Required: true},
		{Name: "integrity", Required: true},
		{Name: "bin", Required: true},
	},
}

// decodeNpm decodes one rootfs.npm "NAME" block.
func (d *decoder) decodeNpm(key string, b *hcl.Block) NpmPackage {
	n := NpmPackage{Name: b.Labels[0]}
	d.ranges[key] = b.DefRange
	c := d.content(key, b.Body, npmSchema)
	attr(d, c, key, "package", &n.Package)
	attr(d, c, key, "version", &n.Version)
	attr(d, c, key, "integrity", &n.Integrity)
	attr(d, c, key, "bin", &n.Bin)
	return n
}
