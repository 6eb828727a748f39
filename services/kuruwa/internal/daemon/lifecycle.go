package daemon

import (
	"sort"
	"sync"

	"github.com/allox-os/allox/services/kuruwa/internal/config"
	"github.com/allox-os/allox/services/kuruwa/internal/wire"
)

func (d *Daemon) ls(c *client) wire.LsResult {
	d.mu.Lock()
	bySock := map[string][]termRef{}
	var res wire.LsResult
	gone := map[string]bool{}
	for _, tr := range d.terms {
		if tr.starting { // not in its instance daemon's list yet, and not gone
			continue
		}
		if _, err := d.canAccess(c.tenant, tr); err != nil {
			continue
		}
		in := d.instances[tr.inst]
		if in == nil || !in.valid {
			res.Terminals = append(res.Terminals, wire.TermInfo{Name: tr.name, ID: tr.id, Instance: tr.inst, Gone: true})
			continue
		}
		bySock[in.sock] = append(bySock[in.sock], *tr)
		gone[in.sock] = false
	}
	instNames := map[string]string{}
	for _, in := range d.instances {
		instNames[in.id] = in.name
		if !d.visibleInstance(c.tenant, in) || in.launching {
			continue
		}
		info := wire.InstanceInfo{Name: in.name, ID: in.id, Definition: in.def, Owner: in.owner.name, Valid: in.valid, Agent: in.agent, Session: in.session}
		for _, tr := range d.terms {
			if tr.inst == in.id {
				info.Terminals++
			}
		}
		if c.tenant.name == config.HostTenant {
			info.Socket, info.PID = in.sock, in.cmd.Process.Pid
		}
		res.Instances = append(res.Instances, info)
	}
	d.mu.Unlock()
	for sock, refs := range bySock {
		var all []wire.TermInfo
		err := d.call(sock, "ls", nil, &all)
		if err != nil {
			// No answer says nothing of its terminals: they are listed as unanswered, not as
			// gone (which gc would forget).
			d.log.Warn("instance daemon did not answer ls; its terminals are listed as unanswered", "instance", refs[0].inst, "err", err)
		}
		byID := map[string]wire.TermInfo{}
		for _, ti := range all {
			byID[ti.ID] = ti
		}
		for _, tr := range refs {
			ti, ok := byID[tr.id]
			ti.Name, ti.ID, ti.Instance, ti.Gone, ti.Unanswered = tr.name, tr.id, instNames[tr.inst], !ok && err == nil, err != nil
			res.Terminals = append(res.Terminals, ti)
		}
	}
	sort.Slice(res.Terminals, func(i, j int) bool { return res.Terminals[i].Name < res.Terminals[j].Name })
	sort.Slice(res.Instances, func(i, j int) bool { return res.Instances[i].Name < res.Instances[j].Name })
	if res.Terminals == nil {
		res.Terminals = []wire.TermInfo{}
	}
	return res
}

// start creates a terminal in the instance the request names; the name is reserved before the
// instance daemon is asked, so two concurrent starts cannot both take it.
func (d *Daemon) start(c *client, a wire.StartArgs) (wire.TermInfo, error) {
	if a.Instance == "" {
		return wire.TermInfo{}, wire.Errorf(wire.CodeBadRequest, "instance", "name the instance to run in, e.g. --instance host (ls --instances lists them)")
	}
	if err := config.CheckName(a.Name); err != nil {
		return wire.TermInfo{}, wire.Errorf(wire.CodeBadRequest, "name", "terminal %v", err)
	}
	d.mu.Lock()
	in := d.instanceByName(a.Instance)
	if in == nil || in.launching {
		d.mu.Unlock()
		return wire.TermInfo{}, d.noInstance(c.tenant, a.Instance)
	}
	keys, err := d.canControl(c.tenant, in, a.Instance)
	if err != nil {
		d.mu.Unlock()
		return wire.TermInfo{}, err
	}
	if in.destroying {
		d.mu.Unlock()
		return wire.TermInfo{}, wire.Errorf(wire.CodeGone, "instance", "instance %s is being cleaned; start a new one", in.name)
	}
	if !in.valid {
		d.mu.Unlock()
		return wire.TermInfo{}, wire.Errorf(wire.CodeGone, "instance", "instance %s is gone: its daemon exited; clean it and start a new one", in.name)
	}
	if _, taken := d.terms[a.Name]; taken {
		d.mu.Unlock()
		return wire.TermInfo{}, wire.Errorf(wire.CodeConflict, "name", "a terminal named %q exists in this daemon; choose another name or clean it", a.Name)
	}
	tr := &termRef{name: a.Name, id: d.nextID("t"), inst: in.id, creator: c.tenant.name, starting: true, typing: new(sync.Mutex)}
	d.terms[a.Name] = tr
	for _, k := range keys {
		c.relied[k] = true
	}
	sock, instName, parent := in.sock, in.name, in.daemonPID
	d.mu.Unlock()
	a.ID, a.Instance = tr.id, in.id
	var info wire.TermInfo
	d.at("start.reserved")
	if err := d.call(sock, "start", a, &info); err != nil {
		d.at("start.failed")
		d.mu.Lock()
		if d.terms[a.Name] == tr { // not removed meanwhile, the name then taken by another start
			delete(d.terms, a.Name)
		}
		d.mu.Unlock()
		return wire.TermInfo{}, err
	}
	id, known := terminalIdentity(parent, info.PID)
	d.mu.Lock()
	tr.starting = false
	if known && !tr.exited { // the exit can be heard before the start's answer
		tr.proc = id
	}
	d.mu.Unlock()
	info.Instance = instName
	return info, nil
}

func (d *Daemon) startInstance(c *client, a wire.InstanceArgs) (wire.InstanceInfo, error) {
	d.mu.Lock()
	keys, err := d.canCreate(c.tenant, a.Definition)
	if err == nil {
		for _, k := range keys {
			c.relied[k] = true
		}
	}
	d.mu.Unlock()
	if err != nil {
		return wire.InstanceInfo{}, err
	}
	in, err := d.createInstance(c.tenant, a)
	if err != nil {
		return wire.InstanceInfo{}, err
	}
	return wire.InstanceInfo{Name: in.name, ID: in.id, Definition: in.def, Owner: in.owner.name, Valid: true, Agent: in.agent, Session: in.session}, nil
}

// gc removes the exited terminals c may manage, the names of terminals whose instance is gone,
// and the invalid instances c may manage.
func (d *Daemon) gc(c *client) []string {
	var removed []string
	for _, ti := range d.ls(c).Terminals {
		d.mu.Lock()
		tr := d.terms[ti.Name]
		ok := tr != nil && tr.id == ti.ID
		if ok {
			_, err := d.canManageTerm(c.tenant, tr, "clean")
			ok = err == nil
		}
		d.mu.Unlock()
		switch {
		case !ok:
		case ti.Unanswered: // nothing is known of it
		case ti.Gone:
			d.forgetTerm(*tr)
			removed = append(removed, ti.Name)
		case !ti.Running:
			d.mu.Lock()
			in := d.instances[tr.inst]
			d.mu.Unlock()
			if in != nil && d.call(in.sock, "clean", wire.CleanArgs{ID: tr.id}, nil) == nil {
				d.forgetTerm(*tr)
				removed = append(removed, ti.Name)
			}
		}
	}
	d.mu.Lock()
	var dead []*instance
	for _, in := range d.instances {
		if _, err := d.canManage(c.tenant, in, in.name); err == nil && !in.valid && !in.launching && !in.destroying {
			dead = append(dead, in)
		}
	}
	d.mu.Unlock()
	for _, in := range dead {
		d.destroy(in)
		removed = append(removed, "instance "+in.name)
	}
	sort.Strings(removed)
	return removed
}
