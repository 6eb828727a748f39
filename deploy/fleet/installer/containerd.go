package installer

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path"

	"github.com/BurntSushi/toml"

	"github.com/allox-os/allox/deploy/kata"
)

// containerd's main configuration and the drop-in directory containerd 2.2's default
// configuration imports (kata-deploy writes its handlers there when the config imports it).
const (
	containerdConfig = "/etc/containerd/config.toml"
	containerdConfD  = "/etc/containerd/conf.d"
)

// containerdState is how Install added the runtime handlers, so Cleanup can take them out.
type containerdState struct {
	// DropIn is the file written into a directory config.toml imports ("" when appended).
	DropIn string `json:"drop_in,omitempty"`
	// Backup is the original config.toml, kept in the state directory, when the handlers were
	// appended to it; Written is the sha256 of what Install left in config.toml.
	Backup  string `json:"backup,omitempty"`
	Written string `json:"written,omitempty"`
}

// configureContainerd adds the payload's runtime handlers, chosen for config.toml's version (3:
// containerd 2.x, 2: containerd 1.7). When config.toml imports conf.d/*.toml they go into a
// drop-in there; otherwise they are appended to config.toml, after a backup, because containerd
// 1.7 lets an imported file replace the whole CRI plugin table.
func (o Options) configureContainerd(name, staged string) (*containerdState, error) {
	orig, err := o.readHost(containerdConfig)
	if err != nil {
		return nil, fmt.Errorf("containerd: %w (generate one: containerd config default > %s)", err, containerdConfig)
	}
	var cfg struct {
		Version int      `toml:"version"`
		Imports []string `toml:"imports"`
	}
	if _, err := toml.Decode(string(orig), &cfg); err != nil {
		return nil, fmt.Errorf("containerd: %s: %w", containerdConfig, err)
	}
	snippet := kata.ContainerdV3
	switch {
	case cfg.Version == 2:
		snippet = kata.ContainerdV2
	case cfg.Version < 2:
		return nil, fmt.Errorf("containerd: %s has version = %d: containerd 1.7 and 2.x configurations set version = 2 or 3; regenerate it with containerd config default", containerdConfig, cfg.Version)
	}
	handlers, err := o.readHost(path.Join(staged, "kata", snippet))
	if err != nil {
		return nil, err
	}
	dropIn := path.Join(containerdConfD, "50-allox-"+name+".toml")
	for _, imp := range cfg.Imports {
		if ok, _ := path.Match(imp, dropIn); ok {
			o.logf("containerd: runtime handlers in %s (imported by %s)", dropIn, containerdConfig)
			return &containerdState{DropIn: dropIn}, o.writeHost(dropIn, handlers, 0o644)
		}
	}
	return o.appendHandlers(name, orig, handlers)
}

func (o Options) appendHandlers(name string, orig, handlers []byte) (*containerdState, error) {
	backup := path.Join(stateDir(name), "containerd-config.toml.orig")
	if err := o.writeHost(backup, orig, 0o600); err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.Write(orig)
	if len(orig) > 0 && orig[len(orig)-1] != '\n' {
		b.WriteByte('\n')
	}
	fmt.Fprintf(&b, "\n# BEGIN allox-deploy %s: removed by allox-deploy cleanup\n%s# END allox-deploy %s\n", name, handlers, name)
	var check map[string]any
	if _, err := toml.Decode(b.String(), &check); err != nil {
		return nil, fmt.Errorf("containerd: %s with the %s handlers added does not parse (%w): it defines them already? add kata/containerd/ by hand", containerdConfig, name, err)
	}
	st, err := o.statHost(containerdConfig)
	if err != nil {
		return nil, err
	}
	if err := o.writeHost(containerdConfig, b.Bytes(), st.Mode().Perm()); err != nil {
		return nil, err
	}
	o.logf("containerd: runtime handlers appended to %s (original kept in %s)", containerdConfig, backup)
	return &containerdState{Backup: backup, Written: sum(b.Bytes())}, nil
}

// unconfigureContainerd removes the drop-in, or restores config.toml from the backup. A config.toml
// changed since Install is not overwritten: the error says what to remove by hand.
func (o Options) unconfigureContainerd(s *containerdState) error {
	if s.DropIn != "" {
		if err := o.removeHost(s.DropIn); err != nil && !os.IsNotExist(err) {
			return err
		}
		return nil
	}
	if s.Backup == "" {
		return nil
	}
	cur, err := o.readHost(containerdConfig)
	if err != nil {
		return err
	}
	if sum(cur) != s.Written {
		return fmt.Errorf("containerd: %s changed after allox-deploy appended its handlers: remove the block between the BEGIN/END allox-deploy lines by hand, then delete %s", containerdConfig, s.Backup)
	}
	orig, err := o.readHost(s.Backup)
	if err != nil {
		return err
	}
	st, err := o.statHost(containerdConfig)
	if err != nil {
		return err
	}
	return o.writeHost(containerdConfig, orig, st.Mode().Perm())
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}
