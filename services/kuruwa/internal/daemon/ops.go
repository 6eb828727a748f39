package daemon

import (
	"github.com/allox-os/allox/services/kuruwa/internal/config"
	"github.com/allox-os/allox/services/kuruwa/internal/wire"
)

// dispatch serves one request on an entry; it reports true when the request became a stream
// that has ended (the connection is then closed).
func (d *Daemon) dispatch(c *client, req wire.Request) bool {
	switch req.Op {
	case "whoami":
		_ = c.reply(map[string]any{"tenant": c.tenant.name, "generation": d.gen}, nil)
	case "ls":
		_ = c.reply(d.ls(c), nil)
	case "start":
		replyTo(c, req, d.start)
	case "status", "screen", "send", "resize":
		d.termOp(c, req)
	case "cancel", "clean":
		d.manageOp(c, req)
	case "tail", "transcript", "attach":
		return d.streamOp(c, req)
	case "gc":
		_ = c.reply(d.gc(c), nil)
	case "instance.start":
		replyTo(c, req, d.startInstance)
	case "tenant.add", "tenant.rm", "tenants", "grant", "revoke":
		_ = c.reply(d.hostOp(c, req))
	default:
		_ = c.reply(nil, wire.Errorf(wire.CodeBadRequest, "op", "unknown operation %q", req.Op))
	}
	return false
}

// replyTo decodes the request's arguments, runs f for the client and replies with its result.
func replyTo[T, R any](c *client, req wire.Request, f func(*client, T) (R, error)) {
	a, err := wire.Decode[T](req.Args)
	if err != nil {
		_ = c.reply(nil, err)
		return
	}
	_ = c.reply(f(c, a))
}

// target is a terminal resolved for one request, with what the request may rely on copied out
// of the lock.
type target struct {
	ref  termRef
	sock string
}

type termCheck func(t *tenant, tr *termRef) ([]string, error)

// resolve finds terminal name for c, checks it, and records the grants the request relies on.
// A stale id (a cleaned terminal whose name was reused, or an earlier daemon run) is refused.
func (d *Daemon) resolve(c *client, name, id string, check termCheck) (target, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if name == "" {
		return target{}, wire.Errorf(wire.CodeBadRequest, "name", "name the terminal (kuruwa ls lists them)")
	}
	tr := d.terms[name]
	if tr == nil {
		return target{}, d.noTerminal(c.tenant, name)
	}
	keys, err := check(c.tenant, tr)
	if err != nil {
		return target{}, err
	}
	if id != "" && id != tr.id {
		return target{}, wire.Errorf(wire.CodeGone, "id", "terminal id %s is not the terminal now named %s (%s): it was cleaned, or belongs to an earlier daemon run", id, name, tr.id)
	}
	in := d.instances[tr.inst]
	if in == nil || !in.valid {
		return target{}, wire.Errorf(wire.CodeGone, "name", "terminal %s is gone: its instance's daemon exited; kuruwa gc removes it", name)
	}
	for _, k := range keys {
		c.relied[k] = true
	}
	return target{ref: *tr, sock: in.sock}, nil
}

// termArgs is the union of the terminal-access operations' arguments.
type termArgs struct {
	wire.SendArgs
	Cols       int  `json:"cols,omitempty"`
	Rows       int  `json:"rows,omitempty"`
	Scrollback bool `json:"scrollback,omitempty"`
	Raw        bool `json:"raw,omitempty"`
}

// manageArgs is the union of cancel's and clean's arguments.
type manageArgs struct {
	wire.CleanArgs
	Signal string `json:"signal,omitempty"`
}

func (d *Daemon) termOp(c *client, req wire.Request) {
	a, err := wire.Decode[termArgs](req.Args)
	if err != nil {
		_ = c.reply(nil, err)
		return
	}
	tg, err := d.resolve(c, a.Name, a.ID, d.canAccess)
	if err != nil {
		_ = c.reply(nil, err)
		return
	}
	id := tg.ref.id
	switch req.Op {
	case "status":
		var info wire.TermInfo
		err = d.call(tg.sock, "status", wire.TermArgs{ID: id}, &info)
		info.Name, info.Instance = tg.ref.name, d.instName(tg.ref.inst)
		_ = c.reply(info, err)
	case "screen":
		// Relayed as the instance daemon encoded it, result or error, without decoding it: a
		// full scrollback is large.
		line, err := d.callRaw(tg.sock, "screen", wire.ScreenArgs{ID: id, Scrollback: a.Scrollback, Raw: a.Raw})
		if err != nil {
			_ = c.reply(nil, err)
			return
		}
		_ = c.replyLine(line)
	case "send":
		_ = c.reply(struct{}{}, d.send(c, tg, a.SendArgs))
	case "resize":
		_ = c.reply(struct{}{}, d.call(tg.sock, "resize", wire.ResizeArgs{ID: id, Cols: a.Cols, Rows: a.Rows}, nil))
	}
}

func (d *Daemon) instName(id string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if in := d.instances[id]; in != nil {
		return in.name
	}
	return id
}

func (d *Daemon) manageOp(c *client, req wire.Request) {
	a, err := wire.Decode[manageArgs](req.Args)
	if err != nil {
		_ = c.reply(nil, err)
		return
	}
	if req.Op == "clean" && a.Instance != "" {
		_ = c.reply(struct{}{}, d.cleanInstance(c, a.CleanArgs))
		return
	}
	check := func(t *tenant, tr *termRef) ([]string, error) { return d.canManageTerm(t, tr, req.Op) }
	if req.Op == "clean" {
		if ref, err := d.cleanGone(c, a.Name, a.ID, check); err == nil {
			d.forgetTerm(ref)
			_ = c.reply(struct{}{}, nil)
			return
		}
	}
	tg, err := d.resolve(c, a.Name, a.ID, check)
	if err != nil {
		_ = c.reply(nil, err)
		return
	}
	if req.Op == "cancel" {
		_ = c.reply(struct{}{}, d.call(tg.sock, "signal", wire.SignalArgs{ID: tg.ref.id, Signal: a.Signal}, nil))
		return
	}
	if err := d.call(tg.sock, "clean", wire.CleanArgs{ID: tg.ref.id, Force: a.Force}, nil); err != nil {
		_ = c.reply(nil, err)
		return
	}
	d.forgetTerm(tg.ref)
	_ = c.reply(struct{}{}, nil)
}

// cleanGone finds, for clean, a terminal whose instance is gone (nothing to ask the instance
// daemon), to be forgotten. Any other terminal, or a stale id, is an error, left to resolve to
// serve or refuse.
func (d *Daemon) cleanGone(c *client, name, id string, check termCheck) (termRef, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	tr := d.terms[name]
	if tr == nil {
		return termRef{}, d.noTerminal(c.tenant, name)
	}
	if _, err := check(c.tenant, tr); err != nil {
		return termRef{}, err
	}
	if id != "" && id != tr.id {
		return termRef{}, wire.Errorf(wire.CodeGone, "id", "terminal id %s is not the terminal now named %s", id, name)
	}
	if in := d.instances[tr.inst]; tr.starting || in != nil && in.valid {
		return termRef{}, wire.Errorf(wire.CodeConflict, "name", "instance of %s is alive", name)
	}
	return *tr, nil
}

// forgetTerm drops a cleaned terminal's name and every grant on it, closing the connections
// that relied on those grants.
func (d *Daemon) forgetTerm(ref termRef) {
	var cut []*client
	defer func() { drain(cut) }()
	d.mu.Lock()
	defer d.mu.Unlock()
	if cur := d.terms[ref.name]; cur != nil && cur.id == ref.id {
		delete(d.terms, ref.name)
	}
	for _, t := range d.tenants {
		if t.terms[ref.id] {
			delete(t.terms, ref.id)
			cut = append(cut, d.revokeLocked(t, termKey(ref.id))...)
		}
	}
}

func (d *Daemon) cleanInstance(c *client, a wire.CleanArgs) error {
	d.mu.Lock()
	in := d.instanceByName(a.Instance)
	if in == nil || in.launching {
		d.mu.Unlock()
		return d.noInstance(c.tenant, a.Instance)
	}
	if _, err := d.canManage(c.tenant, in, a.Instance); err != nil {
		d.mu.Unlock()
		return err
	}
	n := 0
	for _, tr := range d.terms {
		if tr.inst == in.id {
			n++
		}
	}
	if n > 0 && !a.Force {
		d.mu.Unlock()
		return wire.Errorf(wire.CodeConflict, "force", "instance %s holds %d terminal(s); clean them first or pass --force to end them with it", in.name, n)
	}
	if in.def == config.HostDefinition && in.owner.name == config.HostTenant && in.name == config.HostDefinition {
		d.mu.Unlock()
		return wire.Errorf(wire.CodeForbidden, "instance", "the host instance lives as long as the daemon; clean its terminals instead")
	}
	// Marked under the lock the count was taken under: a start that comes after is refused.
	first := markDestroying(in)
	d.mu.Unlock()
	d.at("clean.checked")
	if first {
		d.teardown(in)
	}
	var cut []*client
	d.mu.Lock()
	for _, t := range d.tenants {
		if t.insts[in.id] {
			delete(t.insts, in.id)
			cut = append(cut, d.revokeLocked(t, instKey(in.id))...)
		}
	}
	d.mu.Unlock()
	drain(cut)
	return nil
}
