package spec

import "github.com/hashicorp/hcl/v2"

var outputSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{{Name: "dir"}},
}

// decodeOutput decodes the output block over the default already in o.
func (d *decoder) decodeOutput(b *hcl.Block, o *Output) {
	c := d.content("output", b.Body, outputSchema)
	attr(d, c, "output", "dir", &o.Dir)
}
