package gateway

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/allox-os/allox/deploy/probe/internal/audit"
	"github.com/allox-os/allox/deploy/probe/internal/spec"
	"github.com/allox-os/allox/deploy/probe/internal/wire"
)

// reconcileLoop runs passes until ctx ends: at every tick, and as soon as a DevBox, a host lease
// or an observation changes.
func (g *Gateway) reconcileLoop(ctx context.Context) {
	t := time.NewTicker(g.cfg.ReconcileEvery)
	defer t.Stop()
	watch := func() clientv3.WatchChan {
		return g.cli.Watch(clientv3.WithRequireLeader(ctx), "/allox/", clientv3.WithPrefix())
	}
	wch := watch()
	for {
		_ = g.Reconcile(ctx) // a failed pass is retried by the next
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case resp, ok := <-wch:
			if !ok {
				wch = watch()
			}
			if !triggers(resp.Events) {
				continue
			}
		}
	}
}

// triggers says whether a change is one a pass reacts to: a spec, a host's lease or an
// observation (not the pass's own writes: placements, intents, audit).
func triggers(evs []*clientv3.Event) bool {
	for _, e := range evs {
		k := string(e.Kv.Key)
		if strings.HasPrefix(k, prefixDevBox) || strings.HasPrefix(k, prefixObserved) ||
			(strings.HasPrefix(k, prefixHost) && strings.HasSuffix(k, "/lease")) {
			return true
		}
	}
	return false
}

// state is one consistent read of what a pass needs.
type state struct {
	devboxes   []kv[spec.DevBox]
	placements map[string]kv[wire.Placement]
	observed   map[string]wire.Observed
	hosts      map[string]host
	used       map[string]int
}

func (g *Gateway) read(ctx context.Context) (*state, error) {
	s := &state{placements: map[string]kv[wire.Placement]{}, observed: map[string]wire.Observed{}, hosts: map[string]host{}, used: map[string]int{}}
	var err error
	if s.devboxes, _, err = list[spec.DevBox](ctx, g.cli, prefixDevBox); err != nil {
		return nil, err
	}
	ps, _, err := list[wire.Placement](ctx, g.cli, prefixPlacement)
	if err != nil {
		return nil, err
	}
	for _, p := range ps {
		s.placements[p.Val.DevBox] = p
		s.used[p.Val.Host]++
	}
	obs, _, err := list[wire.Observed](ctx, g.cli, prefixObserved)
	if err != nil {
		return nil, err
	}
	for _, o := range obs {
		s.observed[o.Key[len(prefixObserved):]] = o.Val
	}
	hs, err := g.hosts(ctx)
	if err != nil {
		return nil, err
	}
	for _, h := range hs {
		s.hosts[h.name] = h
	}
	return s, nil
}

// Reconcile makes one pass over every DevBox: desired against placed and observed. It is the
// reconcile loop (desired vs observed), the lease loop (a host whose lease vanished after
// lost_after loses its placements; a host that registered again gets its placements under the
// new epoch) and the scheduler (an unplaced DevBox goes to the host with the most free slots).
func (g *Gateway) Reconcile(ctx context.Context) error {
	lead, ok := g.leader.cmp()
	if !ok {
		return fmt.Errorf("%w: only the leader reconciles", ErrDenied)
	}
	s, err := g.read(ctx)
	if err != nil {
		return err
	}
	var firstErr error
	for _, d := range s.devboxes {
		if err := g.reconcileOne(ctx, lead, s, d); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	return firstErr
}

func (g *Gateway) reconcileOne(ctx context.Context, lead clientv3.Cmp, s *state, d kv[spec.DevBox]) error {
	name, gen := d.Val.Name, d.ModRev
	p, placed := s.placements[name]
	running := d.Val.State == spec.StateRunning
	actor := "gateway:" + g.cfg.Replica
	base := []clientv3.Cmp{lead, unchanged(prefixDevBox+name, gen), unchanged(prefixPlacement+name, p.ModRev)}
	switch {
	case !placed && running:
		h, ok := s.schedule()
		if !ok {
			return nil // no host with a free slot: the next pass tries again
		}
		np := wire.Placement{DevBox: name, Host: h.name, Epoch: h.epoch, Generation: gen}
		in := g.intent(wire.IntentBoot, np, &d.Val)
		_, err := g.commit(ctx, append(base, epochIs(h)), putJSON(prefixPlacement+name, np), putJSON(intentPrefix(h.name)+in.ID, in),
			auditOp(audit.Record{Actor: actor, Action: "place", Object: "devbox/" + name, Host: h.name, Epoch: h.epoch, TraceID: in.TraceID,
				Reason: fmt.Sprintf("scheduled on the host with the most free slots (%d of %d)", h.status.Capacity.Slots-s.used[h.name], h.status.Capacity.Slots)}))
		if err == nil {
			s.used[h.name]++
		}
		return err
	case !placed:
		return nil
	}
	h, alive := s.hosts[p.Val.Host]
	switch {
	case !alive:
		// The lease key is gone: lost_after passed without a renewal. The Probe fenced itself at
		// stop_after, before this; only now may the DevBox move.
		ops := g.dropIntents(ctx, p.Val.Host, name)
		rec := audit.Record{Actor: actor, Action: "reassign", Object: "devbox/" + name, Host: p.Val.Host, Epoch: p.Val.Epoch,
			Reason: fmt.Sprintf("host %s lost: no renewal for lost_after %v", p.Val.Host, g.cfg.LostAfter)}
		if !running {
			_, err := g.commit(ctx, base, append(ops, clientv3.OpDelete(prefixPlacement+name), auditOp(rec))...)
			return err
		}
		s.used[p.Val.Host]--
		nh, ok := s.schedule()
		if !ok {
			_, err := g.commit(ctx, base, append(ops, clientv3.OpDelete(prefixPlacement+name), auditOp(rec))...)
			return err
		}
		np := wire.Placement{DevBox: name, Host: nh.name, Epoch: nh.epoch, Generation: gen}
		in := g.intent(wire.IntentBoot, np, &d.Val)
		rec.TraceID, rec.Reason = in.TraceID, rec.Reason+"; placed on "+nh.name
		_, err := g.commit(ctx, append(base, epochIs(nh)), append(ops, putJSON(prefixPlacement+name, np), putJSON(intentPrefix(nh.name)+in.ID, in), auditOp(rec))...)
		if err == nil {
			s.used[nh.name]++
		}
		return err
	case h.epoch != p.Val.Epoch || (running && p.Val.Generation != gen):
		// The host registered again (a restarted Probe: new epoch), or the spec changed: the
		// intents of the old epoch or spec are withdrawn and issued anew.
		np := wire.Placement{DevBox: name, Host: h.name, Epoch: h.epoch, Generation: gen, Stopping: p.Val.Stopping && !running}
		kind := wire.IntentBoot
		if !running {
			kind = wire.IntentStop
			np.Stopping = true
		}
		in := g.intent(kind, np, &d.Val)
		ops := g.dropIntents(ctx, h.name, name, intentPrefix(h.name)+in.ID)
		_, err := g.commit(ctx, append(base, epochIs(h)), append(ops, putJSON(prefixPlacement+name, np), putJSON(intentPrefix(h.name)+in.ID, in),
			auditOp(audit.Record{Actor: actor, Action: "reissue", Object: "devbox/" + name, Host: h.name, Epoch: h.epoch, TraceID: in.TraceID,
				Reason: fmt.Sprintf("placement had epoch %d generation %d; host holds epoch %d, spec is generation %d", p.Val.Epoch, p.Val.Generation, h.epoch, gen)}))...)
		return err
	case !running && !p.Val.Stopping:
		np := p.Val
		np.Stopping = true
		in := g.intent(wire.IntentStop, np, &d.Val)
		_, err := g.commit(ctx, append(base, epochIs(h)), putJSON(prefixPlacement+name, np), putJSON(intentPrefix(h.name)+in.ID, in),
			auditOp(audit.Record{Actor: actor, Action: "stop", Object: "devbox/" + name, Host: h.name, Epoch: h.epoch, TraceID: in.TraceID, Reason: "desired state is stopped"}))
		return err
	case !running && p.Val.Stopping:
		if o := s.observed[name]; o.Phase == wire.PhaseStopped && o.Epoch == p.Val.Epoch {
			_, err := g.commit(ctx, base, clientv3.OpDelete(prefixPlacement+name),
				auditOp(audit.Record{Actor: actor, Action: "unplace", Object: "devbox/" + name, Host: h.name, Epoch: h.epoch, Reason: "the probe reported it stopped"}))
			return err
		}
	}
	return nil
}

func epochIs(h host) clientv3.Cmp {
	return clientv3.Compare(clientv3.ModRevision(leaseKey(h.name)), "=", h.epoch)
}

// intent makes the intent of kind for placement p. Its id is derived from what it is for, so that
// a pass repeated (by this leader or the next) writes the same intent, not a second one.
func (g *Gateway) intent(kind string, p wire.Placement, d *spec.DevBox) wire.Intent {
	return wire.Intent{ID: fmt.Sprintf("%s-%s-g%d-e%d", kind, p.DevBox, p.Generation, p.Epoch), Host: p.Host, Epoch: p.Epoch,
		Kind: kind, DevBox: p.DevBox, Spec: d, TraceID: wire.NewTraceID(), Issued: time.Now().UTC()}
}

// dropIntents returns the deletes of devbox's pending lifecycle intents on host.
func (g *Gateway) dropIntents(ctx context.Context, hostName, devbox string, keep ...string) []clientv3.Op {
	ins, _, err := list[wire.Intent](ctx, g.cli, intentPrefix(hostName))
	if err != nil {
		return nil
	}
	var ops []clientv3.Op
	for _, in := range ins {
		if in.Val.DevBox == devbox && !slices.Contains(keep, in.Key) {
			ops = append(ops, clientv3.OpDelete(in.Key))
		}
	}
	return ops
}

// schedule picks the live, healthy host with the most free slots (ties: by name).
func (s *state) schedule() (host, bool) {
	var cands []host
	for _, h := range s.hosts {
		if h.status.Healthy && h.status.Capacity.Slots-s.used[h.name] > 0 {
			cands = append(cands, h)
		}
	}
	if len(cands) == 0 {
		return host{}, false
	}
	sort.Slice(cands, func(i, j int) bool {
		fi, fj := cands[i].status.Capacity.Slots-s.used[cands[i].name], cands[j].status.Capacity.Slots-s.used[cands[j].name]
		if fi != fj {
			return fi > fj
		}
		return cands[i].name < cands[j].name
	})
	return cands[0], true
}
