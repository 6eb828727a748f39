package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/allox-os/allox/deploy/probe/internal/audit"
	"github.com/allox-os/allox/deploy/probe/internal/wire"
)

// Pull returns host's pending intents of epoch. When none is newer than after, it waits (up to
// wait) for one to be written. A Probe whose epoch is not current gets ErrLost and nothing.
func (g *Gateway) Pull(ctx context.Context, hostName string, epoch, after int64, wait time.Duration) (wire.Intents, error) {
	for {
		if _, err := g.current(ctx, hostName, epoch); err != nil {
			return wire.Intents{}, err
		}
		ins, rev, err := list[wire.Intent](ctx, g.cli, intentPrefix(hostName))
		if err != nil {
			return wire.Intents{}, err
		}
		out := wire.Intents{Intents: []wire.Intent{}, Revision: rev}
		newer := false
		for _, in := range ins {
			if in.Val.Epoch == epoch { // older epochs' intents are never handed out
				out.Intents = append(out.Intents, in.Val)
				newer = newer || in.ModRev > after
			}
		}
		if newer || wait <= 0 {
			return out, nil
		}
		wctx, cancel := context.WithTimeout(ctx, wait)
		wch := g.cli.Watch(clientv3.WithRequireLeader(wctx), intentPrefix(hostName), clientv3.WithPrefix(), clientv3.WithRev(rev+1))
		select {
		case <-wctx.Done():
		case <-wch:
		}
		timedOut := wctx.Err() != nil
		cancel()
		if ctx.Err() != nil {
			return out, ctx.Err()
		}
		if timedOut {
			return out, nil
		}
		wait = 0 // one more read, then return what is there
	}
}

// Report takes a batch of events from host under epoch. Events of an epoch that is not current
// are refused whole: a fenced or restarted Probe cannot write observed state.
func (g *Gateway) Report(ctx context.Context, batch wire.Events) error {
	if _, err := g.current(ctx, batch.Host, batch.Epoch); err != nil {
		return err
	}
	for i, ev := range batch.Events {
		if ev.Epoch != batch.Epoch {
			return fmt.Errorf("%w: events.%d.epoch %d is not the batch's epoch %d", ErrInvalid, i, ev.Epoch, batch.Epoch)
		}
	}
	for _, ev := range batch.Events {
		if err := g.event(ctx, batch.Host, ev); err != nil && !errors.Is(err, ErrConflict) {
			return err
		}
	}
	return nil
}

func (g *Gateway) event(ctx context.Context, hostName string, ev wire.Event) error {
	actor := "probe:" + hostName
	epochCmp := clientv3.Compare(clientv3.ModRevision(leaseKey(hostName)), "=", ev.Epoch)
	rec := audit.Record{Actor: actor, Action: ev.Kind, Object: "devbox/" + ev.DevBox, Reason: ev.Reason, TraceID: ev.TraceID, Epoch: ev.Epoch, Host: hostName}
	switch {
	case ev.Session != "":
		rec.Object = "session/" + ev.DevBox + "/" + ev.Session
	case ev.DevBox == "":
		rec.Object = "host/" + hostName // the Probe's own: a channel's listener
	}
	switch ev.Kind {
	case wire.EventIntentDone, wire.EventIntentFailed:
		key := intentPrefix(hostName) + ev.IntentID
		var in wire.Intent
		rev, err := g.getJSON(ctx, key, &in)
		if err != nil || rev == 0 {
			return err // done before, or withdrawn: nothing to record
		}
		res := wire.OpResult{ID: ev.IntentID, Done: ev.Kind == wire.EventIntentDone, Result: ev.Result}
		if !res.Done {
			res.Failed = ev.Reason
		}
		rec.Action, rec.Object, rec.TraceID = ev.Kind+" "+in.Kind, "devbox/"+in.DevBox, in.TraceID
		if in.Kind == wire.IntentTask {
			g.tasks.drop(in.ID) // its Probe has it (or gave up on it)
		}
		_, err = g.commit(ctx, []clientv3.Cmp{epochCmp, unchanged(key, rev)}, clientv3.OpDelete(key), putJSON(prefixResult+ev.IntentID, res), auditOp(rec))
		return err
	case wire.EventPhase:
		return g.observe(ctx, hostName, ev, epochCmp)
	case wire.EventAgentStatus:
		if ev.Session == "" || ev.IntentID == "" || !slices.Contains(agentStatuses, ev.Phase) {
			return fmt.Errorf("%w: an agent.status event names its session, its task intent and a status (phase %q: use one of %s)", ErrInvalid, ev.Phase, strings.Join(agentStatuses, ", "))
		}
		return g.observe(ctx, hostName, ev, epochCmp, auditOp(rec))
	case wire.EventFault, wire.EventEscalation, wire.EventFence, wire.EventActivity:
		_, err := g.commit(ctx, []clientv3.Cmp{epochCmp}, auditOp(rec))
		return err
	}
	return fmt.Errorf("%w: event kind %q: use one of intent.done, intent.failed, phase, agent.status, fault, escalation, fence, activity", ErrInvalid, ev.Kind)
}

var agentStatuses = []string{wire.AgentWorking, wire.AgentIdle, wire.AgentApproval, wire.AgentDone, wire.AgentFailed}

// observe records a DevBox's or session's phase, or a session's agent status, only from the host
// it is placed on now; with the extra ops (the agent status's audit record) in the same write.
func (g *Gateway) observe(ctx context.Context, hostName string, ev wire.Event, epochCmp clientv3.Cmp, extra ...clientv3.Op) error {
	var p wire.Placement
	prev, err := g.getJSON(ctx, prefixPlacement+ev.DevBox, &p)
	if err != nil {
		return err
	}
	if prev == 0 || p.Host != hostName || p.Epoch != ev.Epoch {
		return fmt.Errorf("%w: devbox %q is not placed on %s under epoch %d", ErrDenied, ev.DevBox, hostName, ev.Epoch)
	}
	for {
		var o wire.Observed
		orev, err := g.getJSON(ctx, prefixObserved+ev.DevBox, &o)
		if err != nil {
			return err
		}
		if o.Epoch != ev.Epoch || o.Host != hostName {
			o = wire.Observed{Host: hostName, Epoch: ev.Epoch}
		}
		switch {
		case ev.Kind == wire.EventAgentStatus:
			if o.Agents == nil {
				o.Agents = map[string]wire.AgentObserved{}
			}
			o.Agents[ev.Session] = wire.AgentObserved{Intent: ev.IntentID, Status: ev.Phase, Reason: ev.Reason, At: ev.At}
		case ev.Session == "":
			o.Phase, o.Reason = ev.Phase, ev.Reason
		default:
			if o.Sessions == nil {
				o.Sessions = map[string]string{}
			}
			o.Sessions[ev.Session] = ev.Phase
		}
		o.At = ev.At
		_, err = g.commit(ctx, []clientv3.Cmp{epochCmp, unchanged(prefixPlacement+ev.DevBox, prev), unchanged(prefixObserved+ev.DevBox, orev)},
			append([]clientv3.Op{putJSON(prefixObserved+ev.DevBox, o)}, extra...)...)
		if !errors.Is(err, ErrConflict) {
			return err
		}
		if _, err := g.current(ctx, hostName, ev.Epoch); err != nil {
			return err
		}
	}
}

// Audit pages the audit trail: up to limit records after the key after ("" from the start).
func (g *Gateway) Audit(ctx context.Context, after string, limit int64) ([]audit.Record, error) {
	from := audit.Prefix
	if after != "" {
		from = after + "\x00"
	}
	resp, err := g.cli.Get(ctx, from, clientv3.WithRange(clientv3.GetPrefixRangeEnd(audit.Prefix)), clientv3.WithLimit(limit))
	if err != nil {
		return nil, fmt.Errorf("etcd audit: %w", err)
	}
	out := make([]audit.Record, 0, len(resp.Kvs))
	for _, k := range resp.Kvs {
		var r audit.Record
		if err := json.Unmarshal(k.Value, &r); err != nil {
			return nil, fmt.Errorf("BUG: audit %s: %w", k.Key, err)
		}
		out = append(out, r)
	}
	return out, nil
}
