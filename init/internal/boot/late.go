package boot

import "github.com/allox-os/allox/internal/manifest"

// Late is the table that the manifest decides before any service starts: the readahead of the
// services' executables, host name, loopback, network and fw_cfg blobs. The store comes after
// (StoreSteps), once the kata-agent runs.
func Late(m *manifest.Manifest) []Step {
	var steps []Step
	if exe := Executables(m); len(exe) > 0 {
		steps = append(steps, Opt{Readahead{exe}})
	}
	steps = append(steps, Opt{Hostname{m.Hostname}}, LinkUp{"lo"})
	if n := m.Network; n != nil && n.Address != "" {
		steps = append(steps, Opt{Network{*n}})
	}
	for _, f := range m.FwCfg {
		steps = append(steps, Opt{FwCfg{f}})
	}
	return steps
}

// StoreSteps mounts the workspace store (formatting a blank disk on the first boot).
func StoreSteps(m *manifest.Manifest) []Step { return []Step{Store{m.Store}} }

// AgentSteps prepare the kernel for the kata-agent: fs.nr_open raised to its open-file limit
// (the kernel refuses an RLIMIT_NOFILE above fs.nr_open, 1048576 by default).
func AgentSteps(nofile uint64) []Step {
	return []Step{Opt{RaiseSysctl{"fs/nr_open", int64(nofile)}}}
}
