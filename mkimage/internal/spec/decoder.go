package spec

import (
	"fmt"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
)

// decoder carries the diagnostics of every stage and remembers where each value came from, so that
// the semantic checks that run after decoding can point at the attribute they are about.
//
// Values are keyed by config path: "kernel.source.sha256", "service.0.after.1", "init.fw_cfg.2".
// A failed key (an attribute that did not decode, a required one that is missing, a block that is
// missing or duplicated) suppresses later diagnostics at that key and below it, so one mistake is
// reported once.
type decoder struct {
	diags  hcl.Diagnostics
	ranges map[string]hcl.Range
	failed map[string]bool
}

func newDecoder(body hcl.Body) *decoder {
	d := &decoder{ranges: map[string]hcl.Range{}, failed: map[string]bool{}}
	d.ranges[""] = body.MissingItemRange()
	return d
}

// at returns the range recorded for key, or for its nearest recorded parent.
func (d *decoder) at(key string) *hcl.Range {
	for {
		if r, ok := d.ranges[key]; ok {
			return &r
		}
		i := strings.LastIndexByte(key, '.')
		if i < 0 {
			key = ""
			continue
		}
		key = key[:i]
	}
}

// suppressed reports whether key or one of its parents failed to decode.
func (d *decoder) suppressed(key string) bool {
	for {
		if d.failed[key] {
			return true
		}
		i := strings.LastIndexByte(key, '.')
		if i < 0 {
			return false
		}
		key = key[:i]
	}
}

// errorf reports a semantic error at key unless key is suppressed.
func (d *decoder) errorf(key, summary, format string, args ...any) {
	if d.suppressed(key) {
		return
	}
	d.diags = append(d.diags, &hcl.Diagnostic{
		Severity: hcl.DiagError,
		Summary:  summary,
		Detail:   fmt.Sprintf(format, args...),
		Subject:  d.at(key),
	})
}

// content applies schema to the body of the block at key and records the block's range. Missing
// required attributes are marked failed so that no semantic check repeats the complaint.
func (d *decoder) content(key string, body hcl.Body, schema *hcl.BodySchema) *hcl.BodyContent {
	var c *hcl.BodyContent
	var diags hcl.Diagnostics
	if sb, ok := body.(*hclsyntax.Body); ok {
		c, _, diags = body.PartialContent(schema)
		d.unknown(sb, schema)
	} else {
		c, diags = body.Content(schema)
	}
	d.diags = append(d.diags, diags...)
	for _, a := range schema.Attributes {
		if _, ok := c.Attributes[a.Name]; !ok && a.Required {
			d.failed[join(key, a.Name)] = true
		}
	}
	return c
}

// block returns the single block of type typ in c, reporting duplicates and, when required, a
// missing one. It returns nil (and marks key failed) when there is no usable block.
func (d *decoder) block(c *hcl.BodyContent, parent hcl.Body, key, typ string, required bool) *hcl.Block {
	blocks := c.Blocks.OfType(typ)
	if len(blocks) == 0 {
		if required {
			d.failed[key] = true
			d.diags = append(d.diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  fmt.Sprintf("Missing %s block", typ),
				Detail:   fmt.Sprintf("Exactly one %q block is required here; add %s { ... }.", typ, typ),
				Subject:  parent.MissingItemRange().Ptr(),
			})
		}
		return nil
	}
	for _, dup := range blocks[1:] {
		d.diags = append(d.diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  fmt.Sprintf("Duplicate %s block", typ),
			Detail: fmt.Sprintf("Only one %q block is allowed here; the first one is at %s. Merge the two blocks.",
				typ, blocks[0].DefRange),
			Subject: dup.DefRange.Ptr(),
		})
	}
	d.ranges[key] = blocks[0].DefRange
	return blocks[0]
}

// attr decodes attribute name of c into dst, leaving dst (its default) alone when the attribute is
// absent or does not decode. It records the ranges of the value and of its list elements and map
// keys under key.name, key.name.INDEX and key.name.KEY.
func attr[T any](d *decoder, c *hcl.BodyContent, key, name string, dst *T) bool {
	a, ok := c.Attributes[name]
	if !ok {
		return false
	}
	key = join(key, name)
	d.ranges[key] = a.Expr.Range()
	var v T
	diags := gohcl.DecodeExpression(a.Expr, nil, &v)
	for _, diag := range diags {
		if diag.Subject != nil && *diag.Subject == a.Expr.StartRange() {
			diag.Subject = a.Expr.Range().Ptr() // the whole value, not its first token
		}
	}
	d.diags = append(d.diags, diags...)
	if diags.HasErrors() {
		d.failed[key] = true
		return false
	}
	d.recordParts(key, a.Expr)
	*dst = v
	return true
}

// recordParts records the ranges of the elements of a list or of the keys of a map expression.
func (d *decoder) recordParts(key string, expr hcl.Expression) {
	if elems, diags := hcl.ExprList(expr); !diags.HasErrors() {
		for i, e := range elems {
			d.ranges[fmt.Sprintf("%s.%d", key, i)] = e.Range()
		}
		return
	}
	if pairs, diags := hcl.ExprMap(expr); !diags.HasErrors() {
		for _, p := range pairs {
			if k, diags := p.Key.Value(nil); !diags.HasErrors() && k.Type() == cty.String && k.IsKnown() && !k.IsNull() {
				d.ranges[join(key, k.AsString())] = p.Key.Range()
			}
		}
	}
}

func join(key, name string) string {
	if key == "" {
		return name
	}
	return key + "." + name
}
