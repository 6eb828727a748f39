package probe

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/allox-os/allox/deploy/probe/internal/spec"
)

// Sandbox is one running Worker Sandbox: the appliance's host listener and its life.
type Sandbox interface {
	Endpoint() string // http://127.0.0.1:PORT of the appliance's host listener
	Token() string    // its bearer token
	Done() <-chan struct{}
	Stop(ctx context.Context) error
}

// VMSnapshotter is a Sandbox that can snapshot its whole VM (QEMU's QMP); a session checkpoint
// is the appliance's business and goes through the Bridge instead.
type VMSnapshotter interface {
	SnapshotVM(ctx context.Context, name string) error
}

// Diagnoser is a Sandbox that can say why its host listener does not answer at bridgeEndpoint:
// FaultListenerLost, FaultEndpointStale or FaultBridgeUnreachable.
type Diagnoser interface {
	Diagnose(ctx context.Context, bridgeEndpoint string) FaultClass
}

// Rebinder is a Sandbox that can bind its host listener's forward again (rebind).
type Rebinder interface {
	Rebind(ctx context.Context) error
}

// EndpointRefresher is a Sandbox that can read its host listener's endpoint again (local
// endpoint refresh); Endpoint then returns the new one.
type EndpointRefresher interface {
	RefreshEndpoint(ctx context.Context) error
}

// Runtime boots Worker Sandboxes of one kind (spec.RuntimeQEMU, spec.RuntimeProcess).
type Runtime interface {
	Boot(ctx context.Context, d spec.DevBox) (Sandbox, error)
}

// ErrNoRuntime: the DevBox names a runtime this host does not offer.
var ErrNoRuntime = errors.New("runtime not offered by this host")

// HostRuntime is the Host Runtime Manager: the Worker Sandboxes of this host, by DevBox. A boot
// holds only its own DevBox's lock: a boot is long (minutes under TCG), and the heartbeat (Count)
// and other DevBoxes' boots must not wait for it.
type HostRuntime struct {
	runtimes map[string]Runtime
	mu       sync.Mutex
	boxes    map[string]Sandbox
	booting  map[string]bool
	names    keyedMutex
}

// NewHostRuntime offers the runtimes given by name.
func NewHostRuntime(runtimes map[string]Runtime) *HostRuntime {
	return &HostRuntime{runtimes: runtimes, boxes: map[string]Sandbox{}, booting: map[string]bool{}}
}

// lock serializes the lifecycle operations of one DevBox.
func (h *HostRuntime) lock(name string) (unlock func()) { return h.names.lock(name) }

// keyedMutex is a mutex per name; the zero value is ready.
type keyedMutex struct {
	mu sync.Mutex
	m  map[string]*sync.Mutex
}

func (k *keyedMutex) lock(name string) (unlock func()) {
	k.mu.Lock()
	if k.m == nil {
		k.m = map[string]*sync.Mutex{}
	}
	m := k.m[name]
	if m == nil {
		m = &sync.Mutex{}
		k.m[name] = m
	}
	k.mu.Unlock()
	m.Lock()
	return m.Unlock
}

// Names lists the runtimes offered.
func (h *HostRuntime) Names() []string {
	var out []string
	for _, n := range []string{spec.RuntimeQEMU, spec.RuntimeProcess} {
		if h.runtimes[n] != nil {
			out = append(out, n)
		}
	}
	return out
}

// Ensure returns d's running sandbox, booting it when there is none (or it exited).
func (h *HostRuntime) Ensure(ctx context.Context, d spec.DevBox) (Sandbox, error) {
	defer h.lock(d.Name)()
	return h.ensure(ctx, d)
}

func (h *HostRuntime) ensure(ctx context.Context, d spec.DevBox) (Sandbox, error) {
	h.mu.Lock()
	if sb, ok := h.boxes[d.Name]; ok {
		select {
		case <-sb.Done():
		default:
			h.mu.Unlock()
			return sb, nil
		}
	}
	rt := h.runtimes[d.Runtime]
	if rt == nil {
		h.mu.Unlock()
		return nil, fmt.Errorf("devbox %s: runtime %q: %w (this host offers %v)", d.Name, d.Runtime, ErrNoRuntime, h.Names())
	}
	h.booting[d.Name] = true // a slot in use while it boots
	h.mu.Unlock()
	sb, err := rt.Boot(ctx, d)
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.booting, d.Name)
	if err != nil {
		return nil, fmt.Errorf("devbox %s: boot: %w", d.Name, err)
	}
	h.boxes[d.Name] = sb
	return sb, nil
}

// Restart stops d's sandbox and boots it again (a self-heal action).
func (h *HostRuntime) Restart(ctx context.Context, d spec.DevBox) (Sandbox, error) {
	defer h.lock(d.Name)()
	if err := h.stop(ctx, d.Name); err != nil {
		return nil, err
	}
	return h.ensure(ctx, d)
}

// Get returns d's sandbox, if it has one.
func (h *HostRuntime) Get(name string) (Sandbox, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	sb, ok := h.boxes[name]
	return sb, ok
}

// Stop stops name's sandbox; stopping one that does not run is not an error.
func (h *HostRuntime) Stop(ctx context.Context, name string) error {
	defer h.lock(name)()
	return h.stop(ctx, name)
}

func (h *HostRuntime) stop(ctx context.Context, name string) error {
	h.mu.Lock()
	sb, ok := h.boxes[name]
	delete(h.boxes, name)
	h.mu.Unlock()
	if !ok {
		return nil
	}
	return sb.Stop(ctx)
}

// Count is the number of sandboxes held or booting.
func (h *HostRuntime) Count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := len(h.boxes)
	for name := range h.booting {
		if h.boxes[name] == nil {
			n++
		}
	}
	return n
}
