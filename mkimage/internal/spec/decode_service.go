package spec

import (
	"github.com/allox-os/allox/internal/manifest"
	"github.com/hashicorp/hcl/v2"
)

var serviceSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "build"},
		{Name: "plugins"},
		{Name: "command", Required: true},
		{Name: "env"},
		{Name: "after"},
		{Name: "restart"},
		{Name: "oom_score_adj"},
		{Name: "nofile"},
		{Name: "critical"},
		{Name: "memory_min"},
		{Name: "memory_low"},
	},
	Blocks: []hcl.BlockHeaderSchema{{Type: "ready"}, {Type: "sandbox"}},
}

var readySchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{{Name: "tcp"}, {Name: "path"}},
}

// decodeService decodes one service "NAME" block; key is its config path ("service.3").
func (d *decoder) decodeService(key string, b *hcl.Block) Service {
	d.ranges[key] = b.DefRange
	d.ranges[key+".name"] = b.LabelRanges[0]
	s := Service{Service: manifest.Service{Name: b.Labels[0], Restart: DefaultRestart}}
	c := d.content(key, b.Body, serviceSchema)
	attr(d, c, key, "build", &s.Build)
	attr(d, c, key, "plugins", &s.Plugins)
	attr(d, c, key, "command", &s.Command)
	attr(d, c, key, "env", &s.Env)
	attr(d, c, key, "after", &s.After)
	attr(d, c, key, "restart", &s.Restart)
	attr(d, c, key, "oom_score_adj", &s.OOMScoreAdj)
	attr(d, c, key, "nofile", &s.NoFile)
	attr(d, c, key, "critical", &s.Critical)
	for _, m := range []struct {
		name string
		dst  *int64
	}{{"memory_min", &s.MemoryMin}, {"memory_low", &s.MemoryLow}} {
		var v string
		if attr(d, c, key, m.name, &v) {
			*m.dst = d.size(key+"."+m.name, v)
		}
	}
	if sb := d.block(c, b.Body, key+".sandbox", "sandbox", false); sb != nil {
		s.Sandbox = d.decodeSandbox(key+".sandbox", sb)
	}
	if rb := d.block(c, b.Body, key+".ready", "ready", false); rb != nil {
		s.Ready = &manifest.Ready{}
		rc := d.content(key+".ready", rb.Body, readySchema)
		attr(d, rc, key+".ready", "tcp", &s.Ready.TCP)
		attr(d, rc, key+".ready", "path", &s.Ready.Path)
	}
	return s
}
