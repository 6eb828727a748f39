package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/allox-os/allox/deploy/probe/internal/audit"
	"github.com/allox-os/allox/deploy/probe/internal/spec"
	"github.com/allox-os/allox/deploy/probe/internal/wire"
)

// Apply writes DevBox specs as desired state, each with a CAS on the revision it read, and audits
// each write. Specs are validated again here: the HTTP API is an entry point of its own.
func (g *Gateway) Apply(ctx context.Context, actor string, a wire.Apply, traceID string) ([]string, error) {
	seen := map[string]bool{}
	for i := range a.DevBoxes {
		d := &a.DevBoxes[i]
		if err := spec.Check(d); err != nil {
			return nil, fmt.Errorf("%w: devboxes.%d: %w", ErrInvalid, i, err)
		}
		if seen[d.Name] {
			return nil, fmt.Errorf("%w: devboxes: %q is given twice", ErrInvalid, d.Name)
		}
		seen[d.Name] = true
	}
	var changed []string
	for _, d := range a.DevBoxes {
		for {
			var old spec.DevBox
			rev, err := g.getJSON(ctx, prefixDevBox+d.Name, &old)
			if err != nil {
				return changed, err
			}
			if rev != 0 && equalSpec(old, d) {
				break
			}
			_, err = g.commit(ctx, []clientv3.Cmp{unchanged(prefixDevBox+d.Name, rev)}, putJSON(prefixDevBox+d.Name, d),
				auditOp(audit.Record{Actor: actor, Action: "apply", Object: "devbox/" + d.Name, Reason: a.Reason, TraceID: traceID}))
			if errors.Is(err, ErrConflict) {
				continue
			}
			if err != nil {
				return changed, err
			}
			changed = append(changed, d.Name)
			break
		}
	}
	return changed, nil
}

func equalSpec(a, b spec.DevBox) bool {
	return a.Name == b.Name && a.Runtime == b.Runtime && a.MemoryMiB == b.MemoryMiB && a.State == b.State &&
		a.Agent == b.Agent && spec.SameSessions(a.Sessions, b.Sessions)
}

// Get returns a DevBox's spec, placement and observed state.
func (g *Gateway) Get(ctx context.Context, name string) (wire.DevBoxStatus, error) {
	var st wire.DevBoxStatus
	rev, err := g.getJSON(ctx, prefixDevBox+name, &st.Spec)
	if err != nil {
		return st, err
	}
	if rev == 0 {
		return st, fmt.Errorf("%w: devbox %q (list them with `gateway list`)", ErrNotFound, name)
	}
	st.Generation = rev
	var p wire.Placement
	if r, err := g.getJSON(ctx, prefixPlacement+name, &p); err != nil {
		return st, err
	} else if r != 0 {
		st.Placement = &p
	}
	var o wire.Observed
	if r, err := g.getJSON(ctx, prefixObserved+name, &o); err != nil {
		return st, err
	} else if r != 0 {
		st.Observed = &o
	}
	return st, nil
}

// List returns every DevBox's status, sorted by name.
func (g *Gateway) List(ctx context.Context) ([]wire.DevBoxStatus, error) {
	resp, err := g.cli.Get(ctx, prefixDevBox, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, fmt.Errorf("etcd list devboxes: %w", err)
	}
	out := make([]wire.DevBoxStatus, 0, len(resp.Kvs))
	for _, k := range resp.Kvs {
		st, err := g.Get(ctx, string(k.Key[len(prefixDevBox):]))
		if err != nil && !errors.Is(err, ErrNotFound) {
			return nil, err
		}
		if err == nil {
			out = append(out, st)
		}
	}
	return out, nil
}

// Op turns an operator's request on a placed DevBox into an intent for its host under the
// placement's epoch. Policy: a rollback discards work, so it needs an approval reference, which
// the audit records.
func (g *Gateway) Op(ctx context.Context, actor string, op wire.Op, traceID string) (string, error) {
	st, err := g.Get(ctx, op.DevBox)
	if err != nil {
		return "", err
	}
	switch op.Kind {
	case wire.IntentCheckpoint, wire.IntentRollback:
		if !hasSession(st.Spec, op.Session) {
			return "", fmt.Errorf("%w: session %q is not a session of devbox %q; name one of its spec's sessions", ErrInvalid, op.Session, op.DevBox)
		}
	case wire.IntentSnapshot:
	default:
		return "", fmt.Errorf("%w: kind %q: use %s, %s or %s", ErrInvalid, op.Kind, wire.IntentCheckpoint, wire.IntentRollback, wire.IntentSnapshot)
	}
	if op.Kind == wire.IntentRollback {
		if op.Checkpoint == "" {
			return "", fmt.Errorf("%w: checkpoint: a rollback names the checkpoint to restore", ErrInvalid)
		}
		if op.Approval == "" {
			return "", fmt.Errorf("%w: approval: a rollback discards the session's work since the checkpoint; pass the approval reference (--approval)", ErrDenied)
		}
	}
	p := st.Placement
	if p == nil || p.Stopping {
		return "", fmt.Errorf("%w: devbox %q is not placed on a host (is it running? see `gateway get %s`)", ErrConflict, op.DevBox, op.DevBox)
	}
	id := "op-" + randomID()
	in := wire.Intent{ID: id, Host: p.Host, Epoch: p.Epoch, Kind: op.Kind, DevBox: op.DevBox, Session: op.Session,
		Checkpoint: op.Checkpoint, TraceID: traceID, Issued: time.Now().UTC()}
	_, err = g.commit(ctx, []clientv3.Cmp{
		clientv3.Compare(clientv3.ModRevision(leaseKey(p.Host)), "=", p.Epoch),
		clientv3.Compare(clientv3.Value(prefixPlacement+op.DevBox), "=", mustJSON(*p)),
	}, putJSON(intentPrefix(p.Host)+id, in),
		auditOp(audit.Record{Actor: actor, Action: op.Kind, Object: "session/" + op.DevBox + "/" + op.Session,
			Reason: op.Reason, Approval: op.Approval, TraceID: traceID, Epoch: p.Epoch, Host: p.Host}))
	if err != nil {
		return "", err
	}
	return id, nil
}

// Result returns an intent's outcome.
func (g *Gateway) Result(ctx context.Context, id string) (wire.OpResult, error) {
	var r wire.OpResult
	rev, err := g.getJSON(ctx, prefixResult+id, &r)
	if err != nil {
		return r, err
	}
	if rev == 0 {
		return wire.OpResult{ID: id}, nil
	}
	return r, nil
}

func randomID() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func hasSession(d spec.DevBox, name string) bool {
	_, ok := d.Session(name)
	return ok
}
