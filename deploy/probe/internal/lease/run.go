package lease

import (
	"context"
	"errors"
	"time"
)

// Run registers, then renews at the Gateway's cadence until ctx ends. A renewal that fails leaves
// the lease standing until stop_after has passed since the last success; then the guard fences.
// ErrLost fences at once and registers again, for a new epoch.
func (g *Guard) Run(ctx context.Context) error {
	defer g.stopTimer()
	for {
		grant, err := g.register(ctx)
		if err != nil {
			return err
		}
		if err := g.renewLoop(ctx, grant); err != nil {
			return err
		}
	}
}

func (g *Guard) register(ctx context.Context) (Grant, error) {
	for {
		grant, err := g.r.Register(ctx)
		if err == nil {
			err = grant.Validate()
		}
		if err == nil {
			g.hold(grant)
			return grant, nil
		}
		select {
		case <-ctx.Done():
			return Grant{}, ctx.Err()
		case <-time.After(g.retry):
		}
	}
}

// renewLoop renews grant until the lease is lost (nil) or ctx ends (its error).
func (g *Guard) renewLoop(ctx context.Context, grant Grant) error {
	t := time.NewTicker(grant.RenewEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		// A slow renewal may take up to half of stop_after (a loaded host, an etcd leader change):
		// the fence timer runs on its own, so waiting longer never delays the fence.
		rctx, cancel := context.WithTimeout(ctx, grant.StopAfter/2)
		next, err := g.r.Renew(rctx, grant.Epoch)
		cancel()
		switch {
		case errors.Is(err, ErrLost):
			g.fence(grant.Epoch, "the gateway no longer holds this lease")
			return nil
		case err != nil:
			continue // the timer fences at stop_after if this goes on
		case next.Epoch != grant.Epoch || next.Validate() != nil:
			g.fence(grant.Epoch, "the gateway renewed with another epoch")
			return nil
		}
		if !g.takeRenewal(grant.Epoch, next) {
			return nil // fenced meanwhile (stop_after passed): register anew
		}
		if next.RenewEvery != grant.RenewEvery {
			t.Reset(next.RenewEvery)
		}
		grant = next
	}
}

// hold takes a new grant and lifts the fence.
func (g *Guard) hold(grant Grant) {
	g.fenceMu.Lock()
	defer g.fenceMu.Unlock()
	g.mu.Lock()
	g.grant, g.renewed, g.fenced = grant, time.Now(), false
	g.armLocked(grant)
	g.notifyLocked()
	g.mu.Unlock()
	g.f.Unfence(grant.Epoch)
}

// takeRenewal records a renewal of epoch; false if the guard fenced before it arrived (a renewal
// that comes back after stop_after does not lift a fence: only a new registration does).
func (g *Guard) takeRenewal(epoch int64, grant Grant) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.fenced || g.grant.Epoch != epoch {
		return false
	}
	g.grant, g.renewed = grant, time.Now()
	g.armLocked(grant)
	return true
}

func (g *Guard) armLocked(grant Grant) {
	if g.timer != nil {
		g.timer.Stop()
	}
	epoch := grant.Epoch
	g.timer = time.AfterFunc(grant.StopAfter, func() { g.fence(epoch, "no renewal within stop_after") })
}

// fence fences epoch's lease, once; a fence of an epoch no longer held does nothing.
func (g *Guard) fence(epoch int64, reason string) {
	g.fenceMu.Lock()
	defer g.fenceMu.Unlock()
	g.mu.Lock()
	if g.fenced || g.grant.Epoch != epoch {
		g.mu.Unlock()
		return
	}
	g.fenced = true
	if g.timer != nil {
		g.timer.Stop()
	}
	g.notifyLocked()
	g.mu.Unlock()
	g.f.Fence(reason)
}

func (g *Guard) notifyLocked() {
	close(g.changed)
	g.changed = make(chan struct{})
}

func (g *Guard) stopTimer() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.timer != nil {
		g.timer.Stop()
	}
}
