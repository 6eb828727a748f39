// Package gateway is the control plane: DevBox and session specs, scheduling and lease issuance,
// authorisation and approval, desired-state writes, the capability registry and metadata-only
// audit. Its state lives in etcd; every write is a compare-and-swap transaction that also writes
// its audit record, and the loops (reconcile, lease, scheduler) run only on the elected leader,
// whose writes are fenced by its election key.
package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"golang.org/x/crypto/ssh"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/allox-os/allox/deploy/probe/internal/audit"
)

// Store keys.
const (
	prefixDevBox    = "/allox/devbox/"
	prefixHost      = "/allox/host/"
	prefixPlacement = "/allox/placement/"
	prefixIntent    = "/allox/intent/"
	prefixObserved  = "/allox/observed/"
	prefixResult    = "/allox/result/"
	prefixLeader    = "/allox/leader"
)

func leaseKey(host string) string     { return prefixHost + host + "/lease" }
func statusKey(host string) string    { return prefixHost + host + "/status" }
func intentPrefix(host string) string { return prefixIntent + host + "/" }

// Sentinels; the HTTP layer maps them to codes.
var (
	ErrNotFound = errors.New("not found")
	ErrConflict = errors.New("conflict: the object changed meanwhile; retry")
	ErrLost     = errors.New("lease lost: register again for a new epoch")
	ErrInvalid  = errors.New("invalid request")
	ErrDenied   = errors.New("denied")
)

// Config holds the lease timings and the replica's name.
type Config struct {
	Replica        string
	RenewEvery     time.Duration
	StopAfter      time.Duration
	LostAfter      time.Duration // whole seconds: it is the etcd lease's TTL
	ReconcileEvery time.Duration
	// SSHCA signs the ssh_remote credentials (SSHCert); nil: the Gateway issues none.
	SSHCA ssh.Signer
}

// Validate checks that the Probe fences itself before the Gateway may reassign.
func (c Config) Validate() error {
	switch {
	case c.LostAfter < 2*time.Second || c.LostAfter%time.Second != 0:
		return fmt.Errorf("--lost-after %v: use whole seconds, at least 2s (it is the etcd lease TTL)", c.LostAfter)
	case c.StopAfter <= 0 || c.StopAfter >= c.LostAfter:
		return fmt.Errorf("--stop-after %v must be positive and shorter than --lost-after %v", c.StopAfter, c.LostAfter)
	case c.RenewEvery <= 0 || c.RenewEvery*2 > c.StopAfter:
		return fmt.Errorf("--renew-every %v must be positive and at most half of --stop-after %v", c.RenewEvery, c.StopAfter)
	}
	return nil
}

// Gateway is one replica.
type Gateway struct {
	cli    *clientv3.Client
	cfg    Config
	leader *leader
	dialog dialogHub // open dialog requests' content, in memory only
	tasks  taskHub   // task prompts not yet fetched by their Probes, in memory only
}

// New returns a replica on cli.
func New(cli *clientv3.Client, cfg Config) (*Gateway, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.ReconcileEvery == 0 {
		cfg.ReconcileEvery = time.Second
	}
	return &Gateway{cli: cli, cfg: cfg, leader: &leader{}}, nil
}

func putJSON(key string, v any, opts ...clientv3.OpOption) clientv3.Op {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("BUG: %T does not marshal: %v", v, err))
	}
	return clientv3.OpPut(key, string(b), opts...)
}

func auditOp(r audit.Record) clientv3.Op {
	r.At = time.Now().UTC()
	r.Key = audit.NewKey(r.At)
	return putJSON(r.Key, r)
}

// absent compares key as not existing.
func absent(key string) clientv3.Cmp { return clientv3.Compare(clientv3.Version(key), "=", 0) }

// unchanged compares key as still at modRev (0: absent).
func unchanged(key string, modRev int64) clientv3.Cmp {
	if modRev == 0 {
		return absent(key)
	}
	return clientv3.Compare(clientv3.ModRevision(key), "=", modRev)
}

// commit runs a CAS transaction; ErrConflict when a comparison failed.
func (g *Gateway) commit(ctx context.Context, cmps []clientv3.Cmp, ops ...clientv3.Op) (int64, error) {
	resp, err := g.cli.Txn(ctx).If(cmps...).Then(ops...).Commit()
	if err != nil {
		return 0, fmt.Errorf("etcd txn: %w", err)
	}
	if !resp.Succeeded {
		return 0, ErrConflict
	}
	return resp.Header.Revision, nil
}

// getJSON reads key into v; its mod revision, 0 when absent.
func (g *Gateway) getJSON(ctx context.Context, key string, v any) (int64, error) {
	resp, err := g.cli.Get(ctx, key)
	if err != nil {
		return 0, fmt.Errorf("etcd get %s: %w", key, err)
	}
	if len(resp.Kvs) == 0 {
		return 0, nil
	}
	if err := json.Unmarshal(resp.Kvs[0].Value, v); err != nil {
		return 0, fmt.Errorf("BUG: %s holds bad JSON: %w", key, err)
	}
	return resp.Kvs[0].ModRevision, nil
}

// kv is one decoded value with its revisions.
type kv[T any] struct {
	Key    string
	Val    T
	ModRev int64
}

func list[T any](ctx context.Context, cli *clientv3.Client, prefix string, opts ...clientv3.OpOption) ([]kv[T], int64, error) {
	resp, err := cli.Get(ctx, prefix, append([]clientv3.OpOption{clientv3.WithPrefix()}, opts...)...)
	if err != nil {
		return nil, 0, fmt.Errorf("etcd list %s: %w", prefix, err)
	}
	out := make([]kv[T], 0, len(resp.Kvs))
	for _, k := range resp.Kvs {
		var v T
		if err := json.Unmarshal(k.Value, &v); err != nil {
			return nil, 0, fmt.Errorf("BUG: %s holds bad JSON: %w", k.Key, err)
		}
		out = append(out, kv[T]{Key: string(k.Key), Val: v, ModRev: k.ModRevision})
	}
	return out, resp.Header.Revision, nil
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("BUG: %T does not marshal: %v", v, err))
	}
	return string(b)
}
