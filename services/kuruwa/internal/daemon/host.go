package daemon

import (
	"os"
	"path/filepath"
	"sort"

	"github.com/allox-os/allox/services/kuruwa/internal/config"
	"github.com/allox-os/allox/services/kuruwa/internal/wire"
)

// hostOp serves the operations only the management entry may use: tenants and grants. A
// restricted tenant can neither create tenants nor delegate.
func (d *Daemon) hostOp(c *client, req wire.Request) (any, error) {
	if c.tenant.name != config.HostTenant {
		return nil, wire.Errorf(wire.CodeForbidden, "op", "%s is for the management entry; tenant %s can neither create tenants nor delegate grants", req.Op, c.tenant.name)
	}
	switch req.Op {
	case "tenants":
		return d.tenantList(), nil
	case "tenant.add", "tenant.rm":
		a, err := wire.Decode[wire.TenantArgs](req.Args)
		if err != nil {
			return nil, err
		}
		if req.Op == "tenant.add" {
			return d.addTenant(a.Name)
		}
		return struct{}{}, d.removeTenant(a.Name)
	default:
		a, err := wire.Decode[wire.GrantArgs](req.Args)
		if err != nil {
			return nil, err
		}
		return struct{}{}, d.grant(a, req.Op == "grant")
	}
}

func (d *Daemon) addTenant(name string) (wire.TenantInfo, error) {
	if err := config.CheckName(name); err != nil {
		return wire.TenantInfo{}, wire.Errorf(wire.CodeBadRequest, "name", "tenant %v", err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closing { // shutdown closed the entries under this lock: nothing would close a new one
		return wire.TenantInfo{}, wire.Errorf(wire.CodeGone, "name", "the daemon is shutting down")
	}
	if _, dup := d.tenants[name]; dup {
		return wire.TenantInfo{}, wire.Errorf(wire.CodeConflict, "name", "tenant %q exists", name)
	}
	t := &tenant{name: name, defs: map[string]bool{}, insts: map[string]bool{}, terms: map[string]bool{}}
	if err := d.openEntry(t, filepath.Dir(d.TenantEntry(name))); err != nil {
		return wire.TenantInfo{}, wire.Errorf(wire.CodeInternal, "name", "%v", err)
	}
	d.tenants[name] = t
	return wire.TenantInfo{Name: name, Entry: t.entry}, nil
}

// removeTenant closes a temporary tenant's entry and every connection on it.
func (d *Daemon) removeTenant(name string) error {
	d.mu.Lock()
	cut, err := d.removeTenantLocked(name)
	d.mu.Unlock()
	drain(cut)
	return err
}

func (d *Daemon) removeTenantLocked(name string) ([]*client, error) {
	t := d.tenants[name]
	switch {
	case t == nil:
		return nil, wire.Errorf(wire.CodeNotFound, "name", "no tenant %q", name)
	case t.persistent:
		return nil, wire.Errorf(wire.CodeForbidden, "name", "tenant %q is declared in the configuration file; remove it there and restart", name)
	}
	delete(d.tenants, name)
	t.defs, t.insts, t.terms = map[string]bool{}, map[string]bool{}, map[string]bool{}
	_ = t.ln.Close()
	_ = os.RemoveAll(filepath.Dir(t.entry))
	d.grantGen.Add(1)
	var cut []*client
	for cl := range d.clients {
		if cl.tenant == t {
			cl.cutLocked("tenant:" + name)
			cut = append(cut, cl)
		}
	}
	return cut, nil
}

// grant adds or (with give false) revokes one grant. Both hold d.mu across the change and the
// closing of the connections that relied on a revoked grant, so a re-grant cannot race ahead; a
// revoke then waits for the writes to a terminal those connections had under way, so that none
// lands after it returns.
func (d *Daemon) grant(a wire.GrantArgs, give bool) error {
	d.mu.Lock()
	cut, err := d.grantLocked(a, give)
	d.mu.Unlock()
	drain(cut)
	return err
}

func (d *Daemon) grantLocked(a wire.GrantArgs, give bool) ([]*client, error) {
	t := d.tenants[a.Tenant]
	if t == nil {
		return nil, wire.Errorf(wire.CodeNotFound, "tenant", "no tenant %q; kuruwa tenant add %s creates it", a.Tenant, a.Tenant)
	}
	if t.name == config.HostTenant {
		return nil, wire.Errorf(wire.CodeBadRequest, "tenant", "the host tenant holds every right; grant to a restricted tenant")
	}
	n := 0
	for _, s := range []string{a.Definition, a.Instance, a.Terminal} {
		if s != "" {
			n++
		}
	}
	if n != 1 {
		return nil, wire.Errorf(wire.CodeBadRequest, "grant", "name exactly one of --definition, --instance or --terminal")
	}
	var set map[string]bool
	var id, key string
	switch {
	case a.Definition != "":
		if _, ok := d.cfg.Definitions[a.Definition]; !ok {
			return nil, wire.Errorf(wire.CodeNotFound, "definition", "no definition %q in the configuration", a.Definition)
		}
		set, id, key = t.defs, a.Definition, defKey(a.Definition)
	case a.Instance != "":
		in := d.instanceByName(a.Instance)
		if in == nil {
			return nil, wire.Errorf(wire.CodeNotFound, "instance", "no instance %q", a.Instance)
		}
		set, id, key = t.insts, in.id, instKey(in.id)
	default:
		tr := d.terms[a.Terminal]
		if tr == nil {
			return nil, wire.Errorf(wire.CodeNotFound, "terminal", "no terminal %q", a.Terminal)
		}
		set, id, key = t.terms, tr.id, termKey(tr.id)
	}
	if give {
		set[id] = true
		return nil, nil
	}
	if !set[id] {
		return nil, wire.Errorf(wire.CodeNotFound, "grant", "tenant %s holds no such grant", t.name)
	}
	delete(set, id)
	return d.revokeLocked(t, key), nil
}

func (d *Daemon) tenantList() []wire.TenantInfo {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []wire.TenantInfo
	for _, name := range sortedKeys(d.tenants) {
		t := d.tenants[name]
		info := wire.TenantInfo{Name: name, Entry: t.entry, Persistent: t.persistent, Definitions: sortedKeys(t.defs)}
		for id := range t.insts {
			if in := d.instances[id]; in != nil {
				info.Instances = append(info.Instances, in.name)
			}
		}
		for _, tr := range d.terms {
			if t.terms[tr.id] {
				info.Terminals = append(info.Terminals, tr.name)
			}
		}
		sort.Strings(info.Instances)
		sort.Strings(info.Terminals)
		for cl := range d.clients {
			if cl.tenant == t {
				info.Connections = append(info.Connections, wire.Peer{PID: cl.peer.PID, UID: cl.peer.UID, GID: cl.peer.GID})
			}
		}
		sort.Slice(info.Connections, func(i, j int) bool { return info.Connections[i].PID < info.Connections[j].PID })
		out = append(out, info)
	}
	return out
}
