// Package sessionnet is the session-network plugin (Plugin API v1): each session's network mode
// (disabled, isolated or proxy), the network namespace a session in a network mode keeps for all
// of its runs, the session's HTTP/CONNECT proxy on 127.0.0.1:3128 inside that namespace, and the
// actions network.connect (a raw TCP relay over the session socket), network.audit and
// network.reload.
//
// The plugin drives two components through the small interfaces it defines: Namespaces (the kept
// network namespaces) and Broker (the egress policy, the proxy, the relay and their audit).
//
// Modes:
//   - disabled: the plugin adds nothing to the session's runs; they run exactly as without it.
//   - isolated: every run of the session starts in the session's own network namespace, created
//     at its first such run under State/netns and reused by the next: only lo, no veth, no route.
//     A server a run leaves listening on the session's loopback is reachable by its next run.
//   - proxy: isolated, plus the session's proxy on 127.0.0.1:3128 in that namespace, served by
//     the broker from the daemon's own namespace, and HTTP_PROXY, HTTPS_PROXY (both spellings)
//     and NO_PROXY set in every run.
//
// Managed runs (root, unsandboxed) of a session in a network mode start in its namespace too:
// the session holds one network. For them the namespace is where their network lives, not a
// boundary: a root process can leave a namespace.
package sessionnet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"sync"
	"syscall"

	"github.com/allox-os/allox/services/internal/plugin"
)

// Name is the plugin's name, as the image spec spells it; Version its version.
const (
	Name    = "session-network"
	Version = "1"
)

// SessionParams are the session.create params the plugin owns.
var SessionParams = []string{"network"}

// ProxyAddr is where a proxy-mode session's runs reach the proxy, inside its namespace.
const ProxyAddr = "127.0.0.1:3128"

// ProxyURL is what the plugin sets HTTP_PROXY and its siblings to; NoProxy is NO_PROXY.
const (
	ProxyURL = "http://" + ProxyAddr
	NoProxy  = "localhost,127.0.0.1,::1"
)

// ProxyEnv are the variables set in every run of a proxy-mode session (declared as RunEnv).
var ProxyEnv = map[string]string{
	"HTTP_PROXY": ProxyURL, "HTTPS_PROXY": ProxyURL, "http_proxy": ProxyURL, "https_proxy": ProxyURL,
	"NO_PROXY": NoProxy, "no_proxy": NoProxy,
}

// Namespaces keeps network namespaces on files (services/internal/netns).
type Namespaces interface {
	// Create makes a namespace with only lo, up, kept by a bind mount on path.
	Create(path string) error
	// Open opens the namespace kept on path.
	Open(path string) (*os.File, error)
	// Remove drops the namespace kept on path; a missing path is no error.
	Remove(path string) error
	// RemoveAll removes every namespace kept in dir (recovery after a crash).
	RemoveAll(dir string) error
	// Listen opens a listener inside ns.
	Listen(ns *os.File, network, addr string) (net.Listener, error)
}

// Broker is the egress broker (services/internal/netbroker).
type Broker interface {
	// Serve serves the session's proxy on ln until Close(agent, session) or ctx ends (the
	// plugin runs it in a goroutine of its own).
	Serve(ctx context.Context, agent, session string, ln net.Listener) error
	// Close stops serving the session: its listener and its connections.
	Close(agent, session string)
	// Dial checks host:port against the policy and connects, for a connect the caller relays
	// (Tunnel.Relay) or drops (Tunnel.Close); run is "" when the caller's run is not known. A
	// destination the policy denies is an error wrapping ErrDenied; every outcome is audited.
	Dial(ctx context.Context, agent, session, run, host string, port uint16) (Tunnel, error)
	// Reload reads the policy file again, keeping the policy in force on error (which names
	// file:line).
	Reload() error
	// Audit is one page of the audit.
	Audit(q AuditQuery) (any, error)
}

// Tunnel is a connection the broker made for a connect.
type Tunnel interface {
	// Relay relays stream and the connection until both directions end, then closes both.
	Relay(stream io.ReadWriteCloser)
	// Close drops the connection unrelayed.
	Close()
}

// ErrDenied is wrapped by Broker.Dial's error for a destination the policy denies.
var ErrDenied = errors.New("denied by the network policy")

// AuditQuery selects a page of the broker's audit (network.audit's params).
type AuditQuery struct {
	AgentID   string `json:"agent_id,omitempty"`
	SessionID string `json:"session_id,omitempty"`
	Offset    int    `json:"offset,omitempty"`
	Limit     int    `json:"limit,omitempty"`
}

// Config is the plugin's configuration, from the daemon's flags.
type Config struct {
	// Default is the mode of a session that does not choose one (--session-network).
	Default Mode
	// Allowed are the modes session.create may choose (--session-network-modes; nil: all).
	Allowed []Mode
	// Policy is the broker's policy file (--session-network-policy), for messages.
	Policy string
	// HUP reloads the policy on SIGHUP while the plugin is open.
	HUP bool
}

// Plugin is the open session-network plugin.
type Plugin struct {
	cfg    Config
	ns     Namespaces
	broker Broker
	state  string // the plugin's state directory
	log    *slog.Logger
	runOf  func(agent, session string, pid int) string // a session socket caller's run (nil: unknown)

	ctx    context.Context // ends at Close: the proxies' Serve
	cancel context.CancelFunc

	mu      sync.Mutex
	modes   map[key]Mode // the sessions' chosen modes (also on disk)
	serving map[key]bool // sessions whose proxy is being served
	hup     chan os.Signal
	wg      sync.WaitGroup
}

type key struct{ agent, session string }

// hash names a session's files: its namespace and its mode record.
func (k key) hash() string { return plugin.SessionRef{AgentID: k.agent, SessionID: k.session}.Hash() }

// New checks cfg and returns the plugin's Open, for plugin.Plugin.Open.
func New(cfg Config, ns Namespaces, broker Broker) (func(context.Context, plugin.Core) (*plugin.Contribution, error), error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if cfg.Allowed == nil {
		cfg.Allowed = Modes
	}
	return func(_ context.Context, core plugin.Core) (*plugin.Contribution, error) {
		p, err := open(cfg, ns, broker, core)
		if err != nil {
			return nil, err
		}
		return p.Contribution(), nil
	}, nil
}

func open(cfg Config, ns Namespaces, broker Broker, core plugin.Core) (*Plugin, error) {
	if ns == nil || broker == nil {
		return nil, errors.New("BUG: sessionnet needs its namespaces and its broker")
	}
	log := core.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := &Plugin{cfg: cfg, ns: ns, broker: broker, state: core.State, log: log, runOf: runOf(core),
		modes: map[key]Mode{}, serving: map[key]bool{}}
	for _, d := range []string{p.nsDir(), p.modeDir()} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("session network: %w", err)
		}
	}
	// Recovery: the namespaces of a daemon that died are nobody's now (its runs died with it).
	if err := ns.RemoveAll(p.nsDir()); err != nil {
		return nil, fmt.Errorf("session network: remove the namespaces the last daemon left: %w", err)
	}
	if err := p.loadModes(); err != nil {
		return nil, err
	}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	if cfg.HUP {
		p.hup = make(chan os.Signal, 1)
		signal.Notify(p.hup, syscall.SIGHUP)
		p.wg.Add(1)
		go p.reloadOnHUP()
	}
	return p, nil
}

func (p *Plugin) nsDir() string   { return filepath.Join(p.state, "netns") }
func (p *Plugin) modeDir() string { return filepath.Join(p.state, "sessions") }

// Contribution is what the plugin adds to the daemon.
func (p *Plugin) Contribution() *plugin.Contribution {
	return &plugin.Contribution{
		Run:      p.run,
		RunEnv:   slices.Sorted(maps.Keys(ProxyEnv)),
		NetNS:    true,
		Sessions: &plugin.SessionHooks{Create: p.create, Info: p.info, Deleted: p.deleted},
		Actions:  p.actions(),
		Close:    p.close,
	}
}

func (p *Plugin) reloadOnHUP() {
	defer p.wg.Done()
	for {
		select {
		case <-p.ctx.Done():
			return
		case <-p.hup:
			if err := p.broker.Reload(); err != nil {
				p.log.Warn("session network: policy reload on SIGHUP failed; the policy in force is kept", "policy", p.cfg.Policy, "error", err.Error())
			} else {
				p.log.Info("session network: policy reloaded on SIGHUP", "policy", p.cfg.Policy)
			}
		}
	}
}

// close stops the proxies and removes every namespace the plugin made.
func (p *Plugin) close() error {
	if p.hup != nil {
		signal.Stop(p.hup)
	}
	p.cancel()
	p.mu.Lock()
	for k := range p.serving {
		p.broker.Close(k.agent, k.session)
	}
	p.serving = map[key]bool{}
	p.mu.Unlock()
	p.wg.Wait()
	return p.ns.RemoveAll(p.nsDir())
}

// runOf names a session socket caller's run through the workspace service (none in tests of the
// plugin's logic without one).
func runOf(core plugin.Core) func(agent, session string, pid int) string {
	if core.Workspace == nil {
		return nil
	}
	return core.Workspace.RunOfPID
}
