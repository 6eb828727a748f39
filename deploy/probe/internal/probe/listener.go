package probe

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/allox-os/allox/deploy/probe/internal/wire"
)

// ServeListener serves the Probe's own listener ln — a channel's endpoint, ssh_remote's — with
// serve until ctx ends or serve returns nil (its server was closed). A listener that breaks
// behind the Probe's back (serve returns an error: the socket was shut down or closed under it)
// is the fault listener_lost of the channel (scope "channel/NAME"), and self-heal's rebind binds
// the same address again, so that clients' configurations stay right; the rebind is bounded,
// backed off and counted like every other action, and one that keeps failing (the port taken by
// another program) escalates to the Gateway and leaves the channel down. Nothing is rebound
// while the Probe is fenced. It reports the address served on each (re)bind through bound.
func (p *Probe) ServeListener(ctx context.Context, channel string, ln net.Listener, serve func(net.Listener) error, bound func(net.Addr)) {
	scope := "channel/" + channel
	var mu sync.Mutex
	cur := ln
	stop := context.AfterFunc(ctx, func() { mu.Lock(); cur.Close(); mu.Unlock() })
	defer stop()
	for {
		err := serve(ln)
		if err == nil || ctx.Err() != nil {
			return
		}
		addr := ln.Addr()
		ln.Close() // the broken socket still holds its port: let the rebind have it
		f := Fault{Scope: scope, Class: FaultListenerLost, Err: fmt.Errorf("%s listener on %s: %w", channel, addr, err)}
		var next net.Listener
		acts := Actions{Rebind: func(context.Context) error {
			l, err := net.Listen(addr.Network(), addr.String())
			next = l
			return err
		}}
		for next == nil {
			if p.guard.Epoch() == 0 {
				if !sleepCtx(ctx, p.cfg.Supervise) {
					return
				}
				continue
			}
			o, why := p.heal.Handle(ctx, f, acts)
			if o != Waiting {
				p.events.Emit(wire.Event{Kind: wire.EventFault, Reason: why})
			}
			switch o {
			case Escalated, Degraded:
				p.events.Emit(wire.Event{Kind: wire.EventEscalation, Reason: why})
				return
			case Recovered:
			default:
				if !sleepCtx(ctx, p.cfg.Supervise) {
					return
				}
			}
		}
		mu.Lock()
		ln, cur = next, next
		mu.Unlock()
		if ctx.Err() != nil {
			ln.Close()
			return
		}
		if bound != nil {
			bound(ln.Addr())
		}
	}
}

// sleepCtx waits d, or less when ctx ends first (false).
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
