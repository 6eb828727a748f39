package sessionnet

import (
	"context"
	"errors"
	"io"

	"github.com/allox-os/allox/internal/rpc"
	"github.com/allox-os/allox/services/internal/plugin"
)

// The plugin's actions.
const (
	ActionConnect = "network.connect"
	ActionAudit   = "network.audit"
	ActionReload  = "network.reload"
)

func (p *Plugin) actions() map[string]plugin.Action {
	return map[string]plugin.Action{
		ActionConnect: {Handler: p.connect, Scope: plugin.ScopeSession, Stream: true},
		ActionAudit:   {Handler: p.audit, ReadOnly: true},
		ActionReload:  {Handler: p.reload},
	}
}

// connect relays the caller's stream to host:port through the broker (a proxy-mode session only).
// The router has bound agent_id and session_id to the caller's session.
func (p *Plugin) connect(_ context.Context, c *plugin.Call) (any, error) {
	var q struct {
		AgentID   string `json:"agent_id"`
		SessionID string `json:"session_id"`
		Host      string `json:"host"`
		Port      int    `json:"port"`
	}
	if err := rpc.DecodeParams(c.Params, &q); err != nil {
		return nil, err
	}
	switch {
	case q.Host == "":
		return nil, rpc.Errorf(rpc.CodeInvalidParams, "params.host", "params.host is required: the destination's host name or address, e.g. github.com")
	case q.Port < 1 || q.Port > 65535:
		return nil, rpc.Errorf(rpc.CodeInvalidParams, "params.port", "params.port %d: use a TCP port, 1 to 65535, e.g. 22", q.Port)
	}
	if m := p.mode(key{q.AgentID, q.SessionID}); m != Proxy {
		return nil, rpc.Errorf(rpc.CodeConflict, "session_id",
			"session %s/%s has network mode %q: network connect needs mode %q; create the session with \"network\": %q in session.create (or start the daemon with --session-network proxy)",
			q.AgentID, q.SessionID, m, Proxy, Proxy)
	}
	// Decided and dialled before the stream is switched, so that a refusal is the call's error
	// (the client prints it and fails); the relay is bounded by the broker's limits and by Close.
	run := ""
	if p.runOf != nil {
		run = p.runOf(q.AgentID, q.SessionID, c.PeerPID)
	}
	t, err := p.broker.Dial(p.ctx, q.AgentID, q.SessionID, run, q.Host, uint16(q.Port))
	switch {
	case errors.Is(err, ErrDenied):
		return nil, rpc.Errorf(rpc.CodeForbidden, "params.host", "network connect %s port %d: %v", q.Host, q.Port, err)
	case err != nil:
		return nil, rpc.Errorf(rpc.CodeUnreachable, "params.host", "network connect %s port %d: %v", q.Host, q.Port, err)
	}
	return plugin.Relay(func(conn io.ReadWriteCloser) error {
		t.Relay(conn)
		return nil
	}), nil
}

// audit pages the broker's audit of proxied requests and connects.
func (p *Plugin) audit(_ context.Context, c *plugin.Call) (any, error) {
	var q AuditQuery
	if err := rpc.DecodeParams(c.Params, &q); err != nil {
		return nil, err
	}
	switch {
	case q.Offset < 0:
		return nil, rpc.Errorf(rpc.CodeInvalidParams, "params.offset", "params.offset %d: use 0 or more (the next page's offset is the reply's next)", q.Offset)
	case q.Limit < 0:
		return nil, rpc.Errorf(rpc.CodeInvalidParams, "params.limit", "params.limit %d: use 1 or more, or leave it out for the default", q.Limit)
	case q.SessionID != "" && q.AgentID == "":
		return nil, rpc.Errorf(rpc.CodeInvalidParams, "params.agent_id", "params.session_id needs params.agent_id: a session is named within its agent")
	}
	page, err := p.broker.Audit(q)
	if err != nil {
		return nil, rpc.Errorf(rpc.CodeInvalidParams, "params", "network audit: %v", err)
	}
	return page, nil
}

// reload reads the policy file again; on error the policy in force is kept and the error names
// file:line.
func (p *Plugin) reload(context.Context, *plugin.Call) (any, error) {
	if err := p.broker.Reload(); err != nil {
		return nil, rpc.Errorf(rpc.CodeInvalidParams, "policy",
			"%v: the policy in force is kept; fix the file and reload again", err)
	}
	return map[string]any{"reloaded": true, "policy": p.cfg.Policy}, nil
}
