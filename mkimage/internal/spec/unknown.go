package spec

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
)

// schemaPlaces names every schema, for pointing a misplaced name at the block it belongs in.
var schemaPlaces = []struct {
	where  string
	schema *hcl.BodySchema
}{
	{"the top level of the spec", imageSchema},
	{"the kernel block", kernelSchema},
	{"the kernel source block", kernelSourceSchema},
	{"the init block", initSchema},
	{"the workspace_store block", storeSchema},
	{"the network block", networkSchema},
	{"fw_cfg blocks", fwCfgSchema},
	{"the rootfs block", rootfsSchema},
	{"service blocks", serviceSchema},
	{"ready blocks", readySchema},
	{"the kata block", kataSchema},
	{"the output block", outputSchema},
}

// unknown reports every argument and block in body that schema does not define, each with the
// most useful hint available: a near name, the other kind of item (argument or block) of that
// name, or the block where the name does belong. Unlike HCL's own Content, it also suggests a
// name that is already set, and reports in source order.
func (d *decoder) unknown(body *hclsyntax.Body, schema *hcl.BodySchema) {
	attrs := slices.SortedFunc(maps.Values(body.Attributes), func(a, b *hclsyntax.Attribute) int {
		return cmp.Compare(a.SrcRange.Start.Byte, b.SrcRange.Start.Byte)
	})
	for _, a := range attrs {
		if !slices.ContainsFunc(schema.Attributes, func(s hcl.AttributeSchema) bool { return s.Name == a.Name }) {
			d.diags = append(d.diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Unsupported argument",
				Detail:   fmt.Sprintf("An argument named %q is not expected here.%s", a.Name, hint(a.Name, true, body, schema)),
				Subject:  a.NameRange.Ptr(),
			})
		}
	}
	for _, b := range body.Blocks {
		if !slices.ContainsFunc(schema.Blocks, func(s hcl.BlockHeaderSchema) bool { return s.Type == b.Type }) {
			d.diags = append(d.diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Unsupported block type",
				Detail:   fmt.Sprintf("Blocks of type %q are not expected here.%s", b.Type, hint(b.Type, false, body, schema)),
				Subject:  b.TypeRange.Ptr(),
			})
		}
	}
}

func hint(name string, isAttr bool, body *hclsyntax.Body, schema *hcl.BodySchema) string {
	var attrNames, blockTypes []string
	for _, a := range schema.Attributes {
		attrNames = append(attrNames, a.Name)
	}
	for _, b := range schema.Blocks {
		blockTypes = append(blockTypes, b.Type)
	}
	switch {
	case !isAttr && slices.Contains(attrNames, name):
		return fmt.Sprintf(" %q is an argument here; write %s = ...", name, name)
	case isAttr && slices.Contains(blockTypes, name):
		return fmt.Sprintf(" %q is a block here; write %s { ... }", name, name)
	}
	switch s := closest(name, append(attrNames, blockTypes...)); {
	case s == "":
	case slices.Contains(blockTypes, s) == !isAttr:
		if a, set := body.Attributes[s]; set {
			return fmt.Sprintf(" Did you mean %q? It is already set on line %d; remove one of the two.", s, a.NameRange.Start.Line)
		}
		return fmt.Sprintf(" Did you mean %q?", s)
	case isAttr:
		return fmt.Sprintf(" Did you mean the %q block? Write %s { ... }", s, s)
	default:
		return fmt.Sprintf(" Did you mean the argument %q? Write %s = ...", s, s)
	}
	var places []string
	for _, p := range schemaPlaces {
		if p.schema != schema && (slices.ContainsFunc(p.schema.Attributes, func(s hcl.AttributeSchema) bool { return s.Name == name }) ||
			slices.ContainsFunc(p.schema.Blocks, func(s hcl.BlockHeaderSchema) bool { return s.Type == name })) {
			places = append(places, p.where)
		}
	}
	if len(places) == 0 {
		return ""
	}
	return fmt.Sprintf(" %q belongs in %s.", name, strings.Join(places, " or "))
}
