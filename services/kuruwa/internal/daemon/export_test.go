package daemon

// SetHook makes the daemon run h at each point it names with d.at, where a request has
// released the lock between two steps, so that a test can run another request in that window.
func (d *Daemon) SetHook(h func(point string)) { d.hook.Store(&h) }

// DropIdleConnections closes the pooled connections to every instance daemon: the next request
// to one dials its socket.
func (d *Daemon) DropIdleConnections() {
	d.mu.Lock()
	var socks []string
	for _, in := range d.instances {
		socks = append(socks, in.sock)
	}
	d.mu.Unlock()
	for _, s := range socks {
		d.pool.drop(s)
	}
}

// AddTenant serves tenant.add as the management entry does, for a request that no connection
// carries any more (one read before shutdown closed its connection).
func (d *Daemon) AddTenant(name string) error {
	_, err := d.addTenant(name)
	return err
}
