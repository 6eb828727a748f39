// Package daemon is Kuruwa's main daemon: one per project, it holds the tenants and their
// grants, starts sandbox instances (each served by its own instance daemon), addresses terminals
// by names unique across the daemon, and serves a management entry for the host tenant and one
// restricted entry per tenant. Every request and every streamed frame is checked against the
// grants; revoking a grant closes the connections that relied on it before the revoke returns.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/allox-os/allox/internal/atomicfile"
	"github.com/allox-os/allox/services/kuruwa/internal/config"
	"github.com/allox-os/allox/services/kuruwa/internal/entry"
	"github.com/allox-os/allox/services/kuruwa/internal/wire"
)

// Daemon is the main daemon.
type Daemon struct {
	dir  string // runtime directory: entries, instance sockets, state
	self string // the kuruwa program, run as instance daemon
	cfg  *config.Config
	gen  uint64 // this run's generation: every id carries it
	log  *slog.Logger

	// mu guards the objects below. A grant mutation holds it while it closes the connections
	// that relied on the grant, so a re-grant cannot slip in before they are closed.
	mu        sync.Mutex
	tenants   map[string]*tenant
	instances map[string]*instance // by id
	terms     map[string]*termRef  // by name
	clients   map[*client]struct{}
	seq       uint64
	grantGen  atomic.Uint64 // bumped by every revocation; streams re-check when it moves
	closing   bool
	wg        sync.WaitGroup
	pool      instancePool // idle connections to instance daemons

	// hook, set only by tests (export_test.go), runs at the named points where a request has
	// released mu between two steps, so that a test can run another request in that window.
	hook atomic.Pointer[func(point string)]
}

type tenant struct {
	name       string
	persistent bool
	defs       map[string]bool // definitions it may instantiate
	insts      map[string]bool // instance ids it may control
	terms      map[string]bool // terminal ids it may access
	entry      string
	ln         net.Listener
}

type termRef struct {
	name, id, inst, creator string
	proc                    procIdentity // its program, when its pid means something here (orphans.go)
	exited                  bool         // its instance daemon said its program exited
	starting                bool         // reserved by a start its instance daemon has not answered
	// typing is held by a send for its whole sequence (send.go), so that no other send through
	// this daemon slips between a paste and its keys.
	typing *sync.Mutex
}

// New prepares a daemon rooted at dir; Run starts it.
func New(cfg *config.Config, dir, self string, log *slog.Logger) (*Daemon, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("directory %s: %w", dir, err)
	}
	if err := entry.SecureDir(abs); err != nil {
		return nil, err
	}
	gen, err := nextGeneration(abs)
	if err != nil {
		return nil, err
	}
	d := &Daemon{
		dir: abs, self: self, cfg: cfg, gen: gen, log: log.With("component", "kuruwa"),
		tenants: map[string]*tenant{}, instances: map[string]*instance{},
		terms: map[string]*termRef{}, clients: map[*client]struct{}{},
	}
	return d, nil
}

// nextGeneration counts daemon runs in dir, so that no id of an earlier run names an object of
// this one.
func nextGeneration(dir string) (uint64, error) {
	path := filepath.Join(dir, "generation")
	var gen uint64
	if b, err := os.ReadFile(path); err == nil {
		gen, err = strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %w; remove it to start counting again", path, err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return 0, fmt.Errorf("read %s: %w", path, err)
	}
	gen++
	if err := atomicfile.Write(path, []byte(strconv.FormatUint(gen, 10)+"\n"), 0o600); err != nil {
		return 0, fmt.Errorf("write %s: %w", path, err)
	}
	return gen, nil
}

// Generation is this run's generation.
func (d *Daemon) Generation() uint64 { return d.gen }

// ManagementEntry is the host tenant's socket.
func (d *Daemon) ManagementEntry() string { return filepath.Join(d.dir, "manage", "sock") }

// TenantEntry is tenant name's socket.
func (d *Daemon) TenantEntry(name string) string {
	return filepath.Join(d.dir, "tenants", name, "sock")
}

// Run starts the host instance, opens the entries and serves until ctx ends; then it destroys
// every instance it started and removes its sockets.
func (d *Daemon) Run(ctx context.Context, ready func()) error {
	host := &tenant{name: config.HostTenant, persistent: true, defs: map[string]bool{}, insts: map[string]bool{}, terms: map[string]bool{}}
	d.tenants[host.name] = host
	// The host instance is ready before any entry answers: a client that reached an entry (or
	// init, which waits for the management socket) can start terminals in it at once.
	for _, sub := range []string{"inst", "state"} {
		if err := entry.SecureDir(filepath.Join(d.dir, sub)); err != nil {
			return err
		}
	}
	if _, err := d.createInstance(host, wire.InstanceArgs{Definition: config.HostDefinition, Name: config.HostDefinition}); err != nil {
		d.shutdown()
		return fmt.Errorf("host instance: %w", err)
	}
	if err := d.openEntry(host, filepath.Join(d.dir, "manage")); err != nil {
		d.shutdown()
		return err
	}
	for _, name := range sortedKeys(d.cfg.Tenants) {
		ct := d.cfg.Tenants[name]
		t := &tenant{name: name, persistent: true, defs: map[string]bool{}, insts: map[string]bool{}, terms: map[string]bool{}}
		for _, def := range ct.Definitions {
			t.defs[def] = true
		}
		if err := d.openEntry(t, filepath.Dir(d.TenantEntry(name))); err != nil {
			d.shutdown()
			return err
		}
		// The management entry already serves: a grant to this tenant may come at once.
		d.mu.Lock()
		d.tenants[name] = t
		d.mu.Unlock()
	}
	d.log.Info("serving", "dir", d.dir, "generation", d.gen, "management", d.ManagementEntry())
	if ready != nil {
		ready()
	}
	<-ctx.Done()
	d.shutdown()
	return nil
}

func (d *Daemon) openEntry(t *tenant, dir string) error {
	ln, path, err := entry.Listen(dir, "sock")
	if err != nil {
		return fmt.Errorf("tenant %s entry: %w", t.name, err)
	}
	t.entry, t.ln = path, ln
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		d.accept(t, ln)
	}()
	return nil
}

// shutdown closes the entries and every connection, destroys every instance (ending its
// terminals and running its cleanup) and removes the sockets this daemon created.
func (d *Daemon) shutdown() {
	d.mu.Lock()
	d.closing = true
	var insts []*instance
	for _, in := range d.instances {
		if !in.launching { // a launching instance is destroyed by its launch (createInstance)
			insts = append(insts, in)
		}
	}
	for _, t := range d.tenants {
		if t.ln != nil {
			_ = t.ln.Close()
			_ = os.Remove(t.entry)
		}
	}
	for c := range d.clients {
		c.markCutLocked() // a send ends its settle delay rather than hold up the shutdown
		c.close()
	}
	d.mu.Unlock()
	d.at("shutdown.closed")
	for _, in := range insts {
		d.destroy(in)
	}
	d.wg.Wait()
}

// at runs the test hook, if any, at point.
func (d *Daemon) at(point string) {
	if h := d.hook.Load(); h != nil {
		(*h)(point)
	}
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }
