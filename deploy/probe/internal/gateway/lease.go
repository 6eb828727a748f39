package gateway

import (
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/allox-os/allox/deploy/probe/internal/audit"
	"github.com/allox-os/allox/deploy/probe/internal/lease"
	"github.com/allox-os/allox/deploy/probe/internal/wire"
)

// hostLease is the value of a host's lease key. The key is attached to the etcd lease, so it
// vanishes lost_after past the last renewal; its mod revision is the host's epoch.
type hostLease struct {
	Host    string           `json:"host"`
	LeaseID clientv3.LeaseID `json:"lease_id"`
}

// hostStatus is what the Probe last reported (attached to the same etcd lease).
type hostStatus struct {
	Capacity     wire.Capacity     `json:"capacity"`
	Capabilities wire.Capabilities `json:"capabilities"`
	Healthy      bool              `json:"healthy"`
	Detail       string            `json:"detail,omitempty"`
}

func (g *Gateway) grant(epoch int64) lease.Grant {
	return lease.Grant{Epoch: epoch, RenewEvery: g.cfg.RenewEvery, StopAfter: g.cfg.StopAfter, LostAfter: g.cfg.LostAfter}
}

// Register gives host a new lease with a new epoch, replacing any lease it held: a restarted Probe
// never gets its old epoch back, and the old one's intents are refused from now on.
func (g *Gateway) Register(ctx context.Context, reg wire.Register, traceID string) (lease.Grant, error) {
	if reg.Capacity.Slots < 0 {
		return lease.Grant{}, fmt.Errorf("%w: capacity.slots %d must not be negative", ErrInvalid, reg.Capacity.Slots)
	}
	lg, err := g.cli.Grant(ctx, int64(g.cfg.LostAfter.Seconds()))
	if err != nil {
		return lease.Grant{}, fmt.Errorf("etcd lease grant: %w", err)
	}
	for {
		var old hostLease
		rev, err := g.getJSON(ctx, leaseKey(reg.Host), &old)
		if err != nil {
			return lease.Grant{}, err
		}
		epoch, err := g.commit(ctx, []clientv3.Cmp{unchanged(leaseKey(reg.Host), rev)},
			putJSON(leaseKey(reg.Host), hostLease{Host: reg.Host, LeaseID: lg.ID}, clientv3.WithLease(lg.ID)),
			putJSON(statusKey(reg.Host), hostStatus{Capacity: reg.Capacity, Capabilities: reg.Capabilities, Healthy: true}, clientv3.WithLease(lg.ID)),
			auditOp(audit.Record{Actor: "probe:" + reg.Host, Action: "register", Object: "host/" + reg.Host, TraceID: traceID, Host: reg.Host,
				Reason: fmt.Sprintf("new epoch (previous lease revision %d)", rev)}))
		if errors.Is(err, ErrConflict) {
			continue
		}
		if err != nil {
			return lease.Grant{}, err
		}
		if rev != 0 && old.LeaseID != lg.ID {
			_, _ = g.cli.Revoke(ctx, old.LeaseID) // its keys moved to the new lease; this ends its keepalives
		}
		// The epoch is the revision of the txn that wrote the lease key: its mod revision.
		return g.grant(epoch), nil
	}
}

// Renew keeps host's lease of epoch alive. ErrLost when the key is gone (lost_after passed) or
// holds another epoch (the host registered again).
func (g *Gateway) Renew(ctx context.Context, hb wire.Heartbeat) (lease.Grant, error) {
	hl, err := g.current(ctx, hb.Host, hb.Epoch)
	if err != nil {
		return lease.Grant{}, err
	}
	if _, err := g.cli.KeepAliveOnce(ctx, hl.LeaseID); err != nil {
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return lease.Grant{}, ErrLost
		}
		return lease.Grant{}, fmt.Errorf("etcd keepalive: %w", err)
	}
	var st hostStatus
	srev, err := g.getJSON(ctx, statusKey(hb.Host), &st)
	if err != nil {
		return lease.Grant{}, err
	}
	if st.Capacity != hb.Capacity || st.Healthy != hb.Healthy || st.Detail != hb.Detail {
		st.Capacity, st.Healthy, st.Detail = hb.Capacity, hb.Healthy, hb.Detail
		_, err := g.commit(ctx, []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(leaseKey(hb.Host)), "=", hb.Epoch), unchanged(statusKey(hb.Host), srev)},
			putJSON(statusKey(hb.Host), st, clientv3.WithLease(hl.LeaseID)))
		if err != nil && !errors.Is(err, ErrConflict) {
			return lease.Grant{}, err
		}
	}
	return g.grant(hb.Epoch), nil
}

// current returns host's lease if epoch is its epoch now.
func (g *Gateway) current(ctx context.Context, host string, epoch int64) (hostLease, error) {
	var hl hostLease
	rev, err := g.getJSON(ctx, leaseKey(host), &hl)
	switch {
	case err != nil:
		return hl, err
	case rev == 0 || rev != epoch:
		return hl, ErrLost
	}
	return hl, nil
}

// Leases lists the hosts that hold a lease now.
func (g *Gateway) Leases(ctx context.Context) ([]wire.LeaseStatus, error) {
	hosts, err := g.hosts(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]wire.LeaseStatus, 0, len(hosts))
	for _, h := range hosts {
		ls := wire.LeaseStatus{Host: h.name, Epoch: h.epoch, Capacity: h.status.Capacity, Capabilities: h.status.Capabilities, Healthy: h.status.Healthy}
		if ttl, err := g.cli.TimeToLive(ctx, h.lease.LeaseID); err == nil {
			ls.TTL = ttl.TTL
		}
		out = append(out, ls)
	}
	return out, nil
}

type host struct {
	name   string
	epoch  int64
	lease  hostLease
	status hostStatus
}

// hosts reads every host with a lease and its status, sorted by name.
func (g *Gateway) hosts(ctx context.Context) ([]host, error) {
	leases, _, err := list[hostLease](ctx, g.cli, prefixHost)
	if err != nil {
		return nil, err
	}
	statuses, _, err := list[hostStatus](ctx, g.cli, prefixHost)
	if err != nil {
		return nil, err
	}
	byKey := map[string]hostStatus{}
	for _, s := range statuses {
		byKey[s.Key] = s.Val
	}
	var out []host
	for _, l := range leases {
		if l.Key != leaseKey(l.Val.Host) {
			continue // a status key read as a lease
		}
		out = append(out, host{name: l.Val.Host, epoch: l.ModRev, lease: l.Val, status: byKey[statusKey(l.Val.Host)]})
	}
	return out, nil
}
