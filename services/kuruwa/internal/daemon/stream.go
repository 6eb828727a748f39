package daemon

import (
	"net"

	"github.com/allox-os/allox/services/kuruwa/internal/wire"
)

// streamOp serves tail, transcript and attach: it checks the grant, then relays frames between
// the client and the instance daemon, re-checking the grant whenever a revocation happened since
// the last frame. A revocation also closes the client connection itself, which ends the relay.
func (d *Daemon) streamOp(c *client, req wire.Request) bool {
	a, err := wire.Decode[wire.TailArgs](req.Args)
	if err != nil {
		_ = c.reply(nil, err)
		return false
	}
	check := d.canAccess
	if req.Op == "attach" {
		check = func(t *tenant, tr *termRef) ([]string, error) {
			in := d.instances[tr.inst]
			if in == nil {
				return nil, d.noTerminal(t, tr.name)
			}
			if _, err := d.canAccess(t, tr); err != nil {
				return nil, err
			}
			return d.canAttach(t, in)
		}
	}
	tg, err := d.resolve(c, a.Name, a.ID, check)
	if err != nil {
		_ = c.reply(nil, err)
		return false
	}
	recheck := func() error { return d.recheckLocked(c, tg, check) }
	nc, err := net.Dial("unix", tg.sock)
	if err != nil {
		_ = c.reply(nil, wire.Errorf(wire.CodeGone, "name", "instance daemon of %s does not answer: %v", a.Name, err))
		return false
	}
	up := wire.NewConn(nc)
	defer up.Close()
	a.ID = tg.ref.id
	if err := up.Call(req.Op, a, nil); err != nil {
		_ = c.reply(nil, err)
		return false
	}
	d.mu.Lock()
	c.recheck = recheck
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		c.recheck = nil
		d.mu.Unlock()
	}()
	if err := c.reply(struct{}{}, nil); err != nil {
		return true
	}
	gen := d.grantGen.Load()
	allowed := func() bool {
		if d.grantGen.Load() == gen {
			return true
		}
		d.mu.Lock()
		defer d.mu.Unlock()
		return recheck() == nil
	}
	// Client to instance: input and resizes for attach; for the others, only the end of the
	// client (a detach, a disconnect or a revocation) matters.
	go func() {
		defer up.Close()
		for {
			var f wire.Frame
			if err := c.conn.Recv(&f); err != nil {
				return
			}
			if req.Op != "attach" || !allowed() {
				return
			}
			if err := up.Send(wire.Frame{Input: f.Input, Size: f.Size}); err != nil {
				return
			}
		}
	}()
	for {
		var f wire.Frame
		if err := up.Recv(&f); err != nil {
			return true
		}
		if !allowed() {
			c.revoked("behind this " + req.Op)
			return true
		}
		if err := c.send(f); err != nil || f.End || f.Error != nil {
			return true
		}
	}
}

// recheckLocked, with d.mu held, checks again that the terminal tg resolved to is still the one
// under its name and that c still passes check for it: what a stream checks after a revocation,
// and a send before each of its writes.
func (d *Daemon) recheckLocked(c *client, tg target, check termCheck) error {
	tr := d.terms[tg.ref.name]
	if tr == nil || tr.id != tg.ref.id {
		return wire.Errorf(wire.CodeGone, "name", "terminal %s was cleaned", tg.ref.name)
	}
	_, err := check(c.tenant, tr)
	return err
}
