package spec

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/allox-os/allox/internal/manifest"
	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"
)

var initSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{{Name: "hostname", Required: true}},
	Blocks: []hcl.BlockHeaderSchema{
		{Type: "workspace_store"},
		{Type: "network"},
		{Type: "fw_cfg", LabelNames: []string{"name"}},
	},
}

var storeSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "serial", Required: true},
		{Name: "mountpoint", Required: true},
		{Name: "label", Required: true},
		{Name: "fallback_size_mib", Required: true},
	},
}

var networkSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "interface", Required: true},
		{Name: "address", Required: true},
		{Name: "gateway"},
	},
}

var fwCfgSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "path", Required: true},
		{Name: "mode", Required: true},
	},
}

func (d *decoder) decodeInit(b *hcl.Block, in *Init) {
	c := d.content("init", b.Body, initSchema)
	attr(d, c, "init", "hostname", &in.Hostname)
	if sb := d.block(c, b.Body, "init.workspace_store", "workspace_store", true); sb != nil {
		const key = "init.workspace_store"
		sc := d.content(key, sb.Body, storeSchema)
		attr(d, sc, key, "serial", &in.Store.Serial)
		attr(d, sc, key, "mountpoint", &in.Store.Mountpoint)
		attr(d, sc, key, "label", &in.Store.Label)
		attr(d, sc, key, "fallback_size_mib", &in.Store.FallbackSizeMiB)
	}
	if nb := d.block(c, b.Body, "init.network", "network", false); nb != nil {
		const key = "init.network"
		in.Network = &manifest.Network{}
		nc := d.content(key, nb.Body, networkSchema)
		attr(d, nc, key, "interface", &in.Network.Interface)
		attr(d, nc, key, "address", &in.Network.Address)
		attr(d, nc, key, "gateway", &in.Network.Gateway)
	}
	for i, fb := range c.Blocks.OfType("fw_cfg") {
		in.FwCfg = append(in.FwCfg, d.decodeFwCfg(fmt.Sprintf("init.fw_cfg.%d", i), fb))
	}
}

func (d *decoder) decodeFwCfg(key string, b *hcl.Block) manifest.FwCfg {
	d.ranges[key] = b.DefRange
	d.ranges[key+".name"] = b.LabelRanges[0]
	f := manifest.FwCfg{Name: b.Labels[0]}
	c := d.content(key, b.Body, fwCfgSchema)
	attr(d, c, key, "path", &f.Path)
	var mode cty.Value
	if attr(d, c, key, "mode", &mode) {
		f.Mode = d.decodeMode(key+".mode", mode)
	}
	return f
}

// decodeMode reads a file mode written as a quoted octal string. A bare number is refused: HCL
// reads 0600 as decimal 600, which is not what anyone means.
func (d *decoder) decodeMode(key string, v cty.Value) uint32 {
	const summary = "Invalid file mode"
	switch {
	case v.IsNull() || !v.IsKnown():
		d.errorf(key, summary, "mode must be a quoted octal string such as \"0600\".")
		return 0
	case v.Type() == cty.Number:
		n := v.AsBigFloat().Text('f', -1)
		d.errorf(key, summary, "mode must be a quoted octal string: HCL reads the bare number %s as decimal. Write mode = %q.",
			n, octalHint(n))
		return 0
	case v.Type() != cty.String:
		d.errorf(key, summary, "mode must be a quoted octal string such as \"0600\"; got a %s.", v.Type().FriendlyName())
		return 0
	}
	s := v.AsString()
	m, err := strconv.ParseUint(s, 8, 32)
	if err != nil || s == "" || m > 0o7777 {
		d.errorf(key, summary, "mode must be an octal number from \"0000\" to \"7777\", such as \"0600\"; got %q.", s)
		return 0
	}
	return uint32(m)
}

// octalHint turns the digits someone wrote as a bare number into the quoted mode they meant.
func octalHint(digits string) string {
	if len(digits) > 4 || strings.Trim(digits, "01234567") != "" {
		return "0600"
	}
	return strings.Repeat("0", 4-len(digits)) + digits
}
