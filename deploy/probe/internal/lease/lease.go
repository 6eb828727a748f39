// Package lease is the Probe's Lease Guard: it holds the host's lease from the Gateway, renews it
// at about a quarter of its duration, self-fences when it could not renew for stop_after (which
// is shorter than the Gateway's lost_after, so the Probe stops before the Gateway may reassign),
// and admits an intent only when it carries the epoch the Probe holds now.
//
// The epoch is the fence, not the lease's expiry time: it is the etcd revision at which the
// Gateway wrote the host's lease key, so it only grows, and a Probe that lost its lease (or
// restarted) can never hold an old epoch again.
package lease

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Grant is what the Gateway returns when it registers or renews a host's lease.
type Grant struct {
	// Epoch is the fencing token: the etcd revision of the host's lease key.
	Epoch int64 `json:"epoch"`
	// RenewEvery is the heartbeat cadence the Gateway asks for (about LostAfter/4).
	RenewEvery time.Duration `json:"renew_every"`
	// StopAfter is how long the Probe may go without a renewal before it fences itself.
	StopAfter time.Duration `json:"stop_after"`
	// LostAfter is how long the Gateway waits before it considers the host lost and reassigns.
	LostAfter time.Duration `json:"lost_after"`
}

// Validate checks the ordering the fence depends on: renewals well inside stop_after, and the
// Probe's self-fence strictly before the Gateway's reassignment.
func (g Grant) Validate() error {
	switch {
	case g.Epoch <= 0:
		return fmt.Errorf("grant: epoch %d must be a positive etcd revision", g.Epoch)
	case g.RenewEvery <= 0 || g.RenewEvery >= g.StopAfter:
		return fmt.Errorf("grant: renew_every %v must be positive and shorter than stop_after %v", g.RenewEvery, g.StopAfter)
	case g.StopAfter >= g.LostAfter:
		return fmt.Errorf("grant: stop_after %v must be shorter than lost_after %v, or the Gateway could reassign before the Probe fences", g.StopAfter, g.LostAfter)
	}
	return nil
}

// Sentinels of the guard.
var (
	// ErrFenced: the Probe holds no valid lease; every state-changing operation is refused.
	ErrFenced = errors.New("probe is fenced: it holds no valid lease from the Gateway")
	// ErrStaleEpoch: an intent carries an epoch other than the one the Probe holds.
	ErrStaleEpoch = errors.New("intent epoch is not the epoch the probe holds")
	// ErrLost: the Gateway no longer has the lease the Probe renews (it expired or was replaced);
	// a Renewer returns it so that the guard registers again for a new epoch.
	ErrLost = errors.New("lease lost at the gateway")
)

// Renewer is the Gateway as the guard sees it.
type Renewer interface {
	Register(ctx context.Context) (Grant, error)
	Renew(ctx context.Context, epoch int64) (Grant, error)
}

// Fencer is what the guard tells when the Probe must stop (Fence) or may act again (Unfence, with
// the new epoch). Calls are serialised and alternate.
type Fencer interface {
	Fence(reason string)
	Unfence(epoch int64)
}

// Guard holds one host's lease. Its zero value is not usable; use New.
type Guard struct {
	r       Renewer
	f       Fencer
	retry   time.Duration // between failed registrations
	mu      sync.Mutex
	fenceMu sync.Mutex // serialises Fencer calls
	grant   Grant      // Epoch 0: none held
	renewed time.Time  // last successful register or renew
	fenced  bool
	timer   *time.Timer // fires stop_after past renewed
	changed chan struct{}
}

// New returns a guard that starts fenced. retry is the pause between failed registrations.
func New(r Renewer, f Fencer, retry time.Duration) *Guard {
	return &Guard{r: r, f: f, retry: retry, fenced: true, changed: make(chan struct{})}
}

// Epoch is the epoch held now, 0 when fenced.
func (g *Guard) Epoch() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.fenced {
		return 0
	}
	return g.grant.Epoch
}

// Grant is the current grant (Epoch 0 when none is held) and whether the guard is fenced.
func (g *Guard) Grant() (Grant, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.grant, g.fenced
}

// Admit lets a state-changing operation under epoch through, or says why not. It checks the
// clock itself, so a Probe that was paused past stop_after refuses even before its timer runs.
func (g *Guard) Admit(epoch int64) error {
	g.mu.Lock()
	if !g.fenced && time.Since(g.renewed) >= g.grant.StopAfter {
		g.mu.Unlock()
		g.fence(g.grant.Epoch, "no renewal within stop_after")
		g.mu.Lock()
	}
	defer g.mu.Unlock()
	switch {
	case g.fenced:
		return ErrFenced
	case epoch != g.grant.Epoch:
		return fmt.Errorf("%w: intent has epoch %d, probe holds %d", ErrStaleEpoch, epoch, g.grant.Epoch)
	}
	return nil
}

// Changed is closed at the next fence or unfence.
func (g *Guard) Changed() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.changed
}
