package gateway

import (
	"context"
	"fmt"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// leader is this replica's leadership: the election key and its create revision, which every
// leader-only write compares, so a replica that lost leadership (a long GC pause, a partition)
// cannot write as leader afterwards.
type leader struct {
	mu  sync.Mutex
	key string
	rev int64
}

func (l *leader) set(key string, rev int64) { l.mu.Lock(); l.key, l.rev = key, rev; l.mu.Unlock() }

// cmp is the comparison that fences a leader's write; ok is false when not leader.
func (l *leader) cmp() (c clientv3.Cmp, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.key == "" {
		return c, false
	}
	return clientv3.Compare(clientv3.CreateRevision(l.key), "=", l.rev), true
}

// IsLeader says whether this replica leads now.
func (g *Gateway) IsLeader() bool { _, ok := g.leader.cmp(); return ok }

// RunLoops campaigns for leadership and, while leader, runs the reconcile, lease and scheduler
// loops (one pass of reconcile does all three). It returns when ctx ends.
func (g *Gateway) RunLoops(ctx context.Context) error {
	for ctx.Err() == nil {
		if err := g.lead(ctx); err != nil && ctx.Err() == nil {
			return err
		}
	}
	return ctx.Err()
}

func (g *Gateway) lead(ctx context.Context) error {
	s, err := concurrency.NewSession(g.cli, concurrency.WithTTL(int(g.cfg.LostAfter.Seconds())), concurrency.WithContext(ctx))
	if err != nil {
		return fmt.Errorf("election session: %w", err)
	}
	defer s.Close()
	e := concurrency.NewElection(s, prefixLeader)
	if err := e.Campaign(ctx, g.cfg.Replica); err != nil {
		return nil // ctx ended, or the session expired: campaign again
	}
	g.leader.set(e.Key(), e.Rev())
	defer g.leader.set("", 0)
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-s.Done():
			cancel()
		case <-lctx.Done():
		}
	}()
	g.reconcileLoop(lctx)
	return nil
}

// Leader names the replica that leads now, "" if none.
func (g *Gateway) Leader(ctx context.Context) (string, error) {
	resp, err := g.cli.Get(ctx, prefixLeader, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend), clientv3.WithLimit(1))
	if err != nil {
		return "", fmt.Errorf("etcd get leader: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return "", nil
	}
	return string(resp.Kvs[0].Value), nil
}
