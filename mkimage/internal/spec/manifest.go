package spec

import (
	"maps"
	"slices"

	"github.com/allox-os/allox/internal/manifest"
)

// Manifest turns the image into the service manifest init reads: the image name and version, the
// init settings and the services in spec order, without their build packages. It shares no
// memory with img.
func (img *Image) Manifest() *manifest.Manifest {
	m := &manifest.Manifest{
		Version:  manifest.Version,
		Image:    manifest.Image{Name: img.Name, Version: img.Version},
		Hostname: img.Init.Hostname,
		Store:    img.Init.Store,
		FwCfg:    slices.Clone(img.Init.FwCfg),
		Services: make([]manifest.Service, 0, len(img.Services)),
	}
	if a := img.Kata.Agent; a != nil {
		m.KataAgent = &manifest.KataAgent{Path: AgentPath, MaxRestarts: a.MaxRestarts}
	}
	if n := img.Init.Network; n != nil {
		c := *n
		m.Network = &c
	}
	for _, s := range img.Services {
		svc := s.Service
		svc.Command = append(slices.Clone(s.Command), s.Sandbox.Flags()...)
		svc.Env = maps.Clone(s.Env)
		svc.After = slices.Clone(s.After)
		if s.Ready != nil {
			r := *s.Ready
			svc.Ready = &r
		}
		m.Services = append(m.Services, svc)
	}
	return m
}
