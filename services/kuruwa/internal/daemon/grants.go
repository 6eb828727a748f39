package daemon

import (
	"github.com/allox-os/allox/services/kuruwa/internal/config"
	"github.com/allox-os/allox/services/kuruwa/internal/wire"
)

// Grant keys name what a request relied on, so a revocation finds the connections to close:
// "def:NAME" (instance creation for a definition, which also carries the management of the
// instances made with it), "inst:ID" (instance control) and "term:ID" (terminal access).
func defKey(def string) string { return "def:" + def }
func instKey(id string) string { return "inst:" + id }
func termKey(id string) string { return "term:" + id }

// The checks below run with d.mu held. Each returns the grant keys the permission rests on
// (none for the host tenant, whose rights cannot be revoked) or an error saying what is missing.

func (d *Daemon) canCreate(t *tenant, def string) ([]string, error) {
	if _, ok := d.cfg.Definitions[def]; !ok {
		return nil, wire.Errorf(wire.CodeNotFound, "definition", "no definition %q; ls shows the definitions this tenant may use", def)
	}
	if t.name == config.HostTenant {
		return nil, nil
	}
	if !t.defs[def] {
		return nil, wire.Errorf(wire.CodeForbidden, "definition", "tenant %s may not create instances of %q; the host grants it with: kuruwa grant %s --definition %s", t.name, def, t.name, def)
	}
	return []string{defKey(def)}, nil
}

// canManage: destroy the instance — the host, or the tenant that created it while it still
// holds the definition grant. ref is how the request named the instance: an instance the
// tenant cannot see is reported by it, not by its name.
func (d *Daemon) canManage(t *tenant, in *instance, ref string) ([]string, error) {
	if t.name == config.HostTenant {
		return nil, nil
	}
	if in.owner == t && t.defs[in.def] {
		return []string{defKey(in.def)}, nil
	}
	if d.visibleInstance(t, in) {
		return nil, wire.Errorf(wire.CodeForbidden, "instance", "tenant %s may use instance %s but not destroy it: only its creator or the host may", t.name, in.name)
	}
	return nil, d.noInstance(t, ref)
}

// canControl: create and manage terminals in the instance named ref.
func (d *Daemon) canControl(t *tenant, in *instance, ref string) ([]string, error) {
	if t.name == config.HostTenant {
		return nil, nil
	}
	if in.owner == t && t.defs[in.def] {
		return []string{defKey(in.def)}, nil
	}
	if t.insts[in.id] {
		return []string{instKey(in.id)}, nil
	}
	return nil, d.noInstance(t, ref)
}

// canAttach: native attach is for the management entry and the instance's owner.
func (d *Daemon) canAttach(t *tenant, in *instance) ([]string, error) {
	if t.name == config.HostTenant {
		return nil, nil
	}
	if in.owner == t && t.defs[in.def] {
		return []string{defKey(in.def)}, nil
	}
	return nil, wire.Errorf(wire.CodeForbidden, "name", "attach is for the management entry or the owner of instance %s; tenant %s may use screen, tail and send instead", in.name, t.name)
}

// canAccess: read output, send input, resize.
func (d *Daemon) canAccess(t *tenant, tr *termRef) ([]string, error) {
	in := d.instances[tr.inst]
	if in != nil {
		if keys, err := d.canControl(t, in, in.name); err == nil {
			return keys, nil
		}
	}
	if t.terms[tr.id] {
		return []string{termKey(tr.id)}, nil
	}
	return nil, d.noTerminal(t, tr.name)
}

// canManageTerm: cancel and clean need control of the terminal's instance; terminal access
// alone is refused by name, since the tenant can see the terminal.
func (d *Daemon) canManageTerm(t *tenant, tr *termRef, op string) ([]string, error) {
	in := d.instances[tr.inst]
	if in != nil {
		if keys, err := d.canControl(t, in, in.name); err == nil {
			return keys, nil
		}
	}
	if t.terms[tr.id] {
		return nil, wire.Errorf(wire.CodeForbidden, "name", "tenant %s may read and type into terminal %s but not %s it: that needs control of its instance", t.name, tr.name, op)
	}
	return nil, d.noTerminal(t, tr.name)
}

func (d *Daemon) visibleInstance(t *tenant, in *instance) bool {
	if t.name == config.HostTenant || t.insts[in.id] || in.owner == t && t.defs[in.def] {
		return true
	}
	for _, tr := range d.terms {
		if tr.inst == in.id && t.terms[tr.id] {
			return true
		}
	}
	return false
}

// A name grants nothing and reveals nothing: an object the tenant has no grant on is reported
// exactly like one that does not exist.
func (d *Daemon) noTerminal(t *tenant, name string) error {
	return wire.Errorf(wire.CodeNotFound, "name", "no terminal %q visible to tenant %s; ls lists the terminals it may use", name, t.name)
}

func (d *Daemon) noInstance(t *tenant, name string) error {
	return wire.Errorf(wire.CodeNotFound, "instance", "no instance %q visible to tenant %s; ls --instances lists the instances it may use", name, t.name)
}

// revokeLocked removes a grant key from t and closes, at once, every connection of t that
// relied on it or whose stream no longer passes its check. It returns those clients, for the
// caller to drain once it released d.mu and before it answers.
func (d *Daemon) revokeLocked(t *tenant, key string) []*client {
	d.grantGen.Add(1)
	var cut []*client
	for c := range d.clients {
		if c.tenant != t {
			continue
		}
		if c.relied[key] || (c.recheck != nil && c.recheck() != nil) {
			c.cutLocked(key)
			cut = append(cut, c)
		}
	}
	return cut
}
