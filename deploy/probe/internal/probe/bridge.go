package probe

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/allox-os/allox/internal/rpc"
)

// FenceReasonPrefix starts the reason of every fence the Probe sets, so that it lifts only its
// own fences (never one the appliance set, e.g. after an inconsistent recovery).
const FenceReasonPrefix = "probe: "

// Bridge is the Workspace Bridge: the appliance's RPC over its authenticated host listener, the
// same wire contract (internal/rpc) a platform's own tooling uses.
type Bridge struct {
	c        *rpc.Client
	endpoint string
}

// NewBridge returns a bridge to the host listener at endpoint (http://127.0.0.1:PORT) with token.
func NewBridge(endpoint, token string) *Bridge {
	return &Bridge{c: rpc.NewClient(endpoint, token, &http.Client{Timeout: 30 * time.Second}), endpoint: endpoint}
}

// Endpoint is the host listener the bridge talks to.
func (b *Bridge) Endpoint() string { return b.endpoint }

// Reachable dials the host listener afresh: the bridge's own requests ride kept-alive
// connections, which outlive a listener (or a forward to it) that no new connection reaches.
func (b *Bridge) Reachable(ctx context.Context) error {
	u, err := url.Parse(b.endpoint)
	if err != nil {
		return err
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", u.Host)
	if err != nil {
		return err
	}
	return c.Close()
}

// Info is system.info.
func (b *Bridge) Info(ctx context.Context) (rpc.SystemInfo, error) {
	var info rpc.SystemInfo
	err := b.c.Call(ctx, rpc.ActionSystemInfo, nil, &info)
	return info, err
}

// EnsureAgent creates the agent unless it exists.
func (b *Bridge) EnsureAgent(ctx context.Context, agent string) error {
	err := b.c.Call(ctx, rpc.ActionAgentCreate, map[string]any{"agent_id": agent}, nil)
	if errors.Is(err, rpc.CodeConflict) {
		return b.c.Call(ctx, rpc.ActionAgentGet, map[string]any{"agent_id": agent}, nil)
	}
	return err
}

// EnsureSession creates the session unless it exists, and returns it.
func (b *Bridge) EnsureSession(ctx context.Context, agent, session string) (rpc.Session, error) {
	var s rpc.Session
	err := b.c.Call(ctx, rpc.ActionSessionCreate, map[string]any{"agent_id": agent, "session_id": session}, &s)
	if errors.Is(err, rpc.CodeConflict) {
		return b.Session(ctx, agent, session)
	}
	return s, err
}

// Session is session.get.
func (b *Bridge) Session(ctx context.Context, agent, session string) (rpc.Session, error) {
	var s rpc.Session
	err := b.c.Call(ctx, rpc.ActionSessionGet, map[string]any{"agent_id": agent, "session_id": session}, &s)
	return s, err
}

// Fence fences the session with the Probe's reason.
func (b *Bridge) Fence(ctx context.Context, agent, session, reason string) error {
	err := b.c.Call(ctx, rpc.ActionSessionFence, map[string]any{"agent_id": agent, "session_id": session, "reason": FenceReasonPrefix + reason}, nil)
	if errors.Is(err, rpc.CodeConflict) {
		return nil // already fenced
	}
	return err
}

// UnfenceOwn lifts the session's fence if the Probe set it; another's fence stays.
func (b *Bridge) UnfenceOwn(ctx context.Context, agent, session string) error {
	s, err := b.Session(ctx, agent, session)
	if err != nil || s.Fenced == nil || len(s.Fenced.Reason) < len(FenceReasonPrefix) || s.Fenced.Reason[:len(FenceReasonPrefix)] != FenceReasonPrefix {
		return err
	}
	return b.c.Call(ctx, rpc.ActionSessionUnfence, map[string]any{"agent_id": agent, "session_id": session}, nil)
}

// Checkpoint takes a session checkpoint through the appliance.
func (b *Bridge) Checkpoint(ctx context.Context, agent, session, id string, labels map[string]string) (rpc.Checkpoint, error) {
	var cp rpc.Checkpoint
	err := b.c.Call(ctx, rpc.ActionCheckpointCreate, map[string]any{"agent_id": agent, "session_id": session, "checkpoint_id": id, "labels": labels}, &cp)
	return cp, err
}

// Rollback restores a session to a checkpoint through the appliance.
func (b *Bridge) Rollback(ctx context.Context, agent, session, checkpoint string) (rpc.Session, error) {
	var s rpc.Session
	err := b.c.Call(ctx, rpc.ActionSessionRollback, map[string]any{"agent_id": agent, "session_id": session, "checkpoint_id": checkpoint}, &s)
	return s, err
}
