package boot

import "github.com/allox-os/allox/internal/manifest"

// Late is the table that the manifest decides: host name, network, fw_cfg blobs and the store.
func Late(m *manifest.Manifest) []Step {
	steps := []Step{
		Opt{Hostname{m.Hostname}},
		LinkUp{"lo"},
	}
	if n := m.Network; n != nil && n.Address != "" {
		steps = append(steps, Opt{Network{*n}})
	}
	for _, f := range m.FwCfg {
		steps = append(steps, Opt{FwCfg{f}})
	}
	return append(steps, Store{m.Store})
}
