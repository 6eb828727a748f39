package netbroker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
)

// Resolver resolves host names for the broker; *net.Resolver is one.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Dialer makes the broker's outgoing connections; *net.Dialer is one.
type Dialer interface {
	DialContext(ctx context.Context, network, address string) (net.Conn, error)
}

// Config is what a Broker needs. PolicyPath and AuditDir must be outside every workspace.
type Config struct {
	PolicyPath    string         // the policy file (see the package doc); required
	Own           []netip.Prefix // the guest's own addresses, denied unless a cidr rule allows them
	AuditDir      string         // where network.jsonl lives; required
	AuditMaxBytes int64          // rotate at this size (0: 8 MiB)
	AuditKeep     int            // rotated files kept (0: 4)
	Limits        Limits
	Resolver      Resolver // nil: net.DefaultResolver
	Dialer        Dialer   // nil: a net.Dialer
	// AuditError, when set, is called with every error writing an audit record (the
	// library does not log; the daemon does).
	AuditError func(error)
}

// Broker holds the policy, the audit, the limits and the sessions it serves.
type Broker struct {
	cfg    Config
	limits Limits
	audit  AuditLog
	policy atomic.Pointer[Policy]

	mu       sync.Mutex
	sessions map[sessionKey]*session
	closed   bool
}

type sessionKey struct{ agent, session string }

// Errors of Serve and Connect.
var (
	ErrClosed  = errors.New("the network broker is closed")
	ErrServing = errors.New("the session's proxy is already being served")
	ErrDenied  = errors.New("denied by the network policy")
)

// DeniedError is a destination the policy denied, with the rule that denied it.
type DeniedError struct {
	Host string
	Port uint16
	Rule string
}

func (e *DeniedError) Error() string {
	return fmt.Sprintf("%s port %d: denied by the network policy (%s)", e.Host, e.Port, e.Rule)
}

func (e *DeniedError) Is(target error) bool { return target == ErrDenied }

// New loads the policy and returns a Broker serving no session yet.
func New(cfg Config) (*Broker, error) {
	switch {
	case cfg.PolicyPath == "":
		return nil, errors.New("network broker: PolicyPath is empty: set the policy file's path (outside every workspace)")
	case cfg.AuditDir == "":
		return nil, errors.New("network broker: AuditDir is empty: set the audit directory (outside every workspace)")
	}
	if cfg.Resolver == nil {
		cfg.Resolver = net.DefaultResolver
	}
	if cfg.Dialer == nil {
		cfg.Dialer = &net.Dialer{}
	}
	b := &Broker{
		cfg:      cfg,
		limits:   cfg.Limits.withDefaults(),
		audit:    AuditLog{Dir: cfg.AuditDir, MaxBytes: cfg.AuditMaxBytes, Keep: cfg.AuditKeep},
		sessions: map[sessionKey]*session{},
	}
	if err := b.Reload(); err != nil {
		return nil, err
	}
	return b, nil
}

// LoadPolicy reads and parses the policy file at path.
func LoadPolicy(path string) (*Policy, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("network policy: %w", err)
	}
	defer f.Close()
	p, err := ParsePolicy(path, f)
	if err != nil {
		return nil, fmt.Errorf("network policy: %w", err)
	}
	return p, nil
}

// Reload reads the policy file again. On error the policy in force is kept. Idle pooled
// destination connections are dropped so that new requests are dialled under the new policy.
func (b *Broker) Reload() error {
	p, err := LoadPolicy(b.cfg.PolicyPath)
	if err != nil {
		return err
	}
	b.policy.Store(p)
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, s := range b.sessions {
		s.tr.CloseIdleConnections()
	}
	return nil
}

// Policy is the policy in force.
func (b *Broker) Policy() *Policy { return b.policy.Load() }

// Serve serves the session's proxy on ln until Close(agent, session), Shutdown or ctx ends, or
// ln fails; it closes ln, and on return the session is closed (its connect relays too) and may
// be served again. It returns nil when stopped by Close, Shutdown or ctx.
func (b *Broker) Serve(ctx context.Context, agent, session string, ln net.Listener) error {
	s, err := b.session(agent, session)
	if err != nil {
		ln.Close()
		return err
	}
	if !s.serving.CompareAndSwap(false, true) {
		ln.Close()
		return fmt.Errorf("agent %s session %s: %w", agent, session, ErrServing)
	}
	stop := context.AfterFunc(ctx, s.close)
	defer stop()
	defer b.drop(sessionKey{agent, session}, s)
	// Client connections beyond 4×MaxConns wait to be accepted; requests beyond MaxConns get 503.
	if err := s.srv.Serve(&limitListener{Listener: ln, sem: make(chan struct{}, 4*b.limits.MaxConns)}); err != nil && !errors.Is(err, net.ErrClosed) && !errors.Is(err, errServerClosed) {
		return fmt.Errorf("agent %s session %s: proxy: %w", agent, session, err)
	}
	return nil
}

// Close stops serving the session: its listener, its proxied requests, tunnels and relays.
func (b *Broker) Close(agent, session string) {
	b.mu.Lock()
	s := b.sessions[sessionKey{agent, session}]
	delete(b.sessions, sessionKey{agent, session})
	b.mu.Unlock()
	if s != nil {
		s.close()
	}
}

// Shutdown closes every session; Serve and Connect fail with ErrClosed afterwards.
func (b *Broker) Shutdown() {
	b.mu.Lock()
	ss := b.sessions
	b.sessions, b.closed = map[sessionKey]*session{}, true
	b.mu.Unlock()
	for _, s := range ss {
		s.close()
	}
}

// drop closes s and forgets it, unless another session has taken its place.
func (b *Broker) drop(k sessionKey, s *session) {
	b.mu.Lock()
	if b.sessions[k] == s {
		delete(b.sessions, k)
	}
	b.mu.Unlock()
	s.close()
}

func (b *Broker) session(agent, session string) (*session, error) {
	if agent == "" || session == "" {
		return nil, errors.New("network broker: agent and session must be set")
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, ErrClosed
	}
	k := sessionKey{agent, session}
	if s := b.sessions[k]; s != nil {
		return s, nil
	}
	s := newSession(b, agent, session)
	b.sessions[k] = s
	return s, nil
}

func (b *Broker) record(r Record) {
	if err := b.audit.Append(r); err != nil && b.cfg.AuditError != nil {
		b.cfg.AuditError(err)
	}
}
