package daemon

import (
	"context"

	"github.com/allox-os/allox/internal/rpc"
	"github.com/allox-os/allox/services/internal/store"
)

func (h workspaceHandlers) sessionCreate(_ context.Context, c *Call) (any, error) {
	var p struct {
		AgentID         string `json:"agent_id"`
		SessionID       string `json:"session_id"`
		TurnCheckpoints *bool  `json:"turn_checkpoints"`
	}
	if err := rpc.DecodeParams(c.Params, &p); err != nil {
		return nil, err
	}
	s, err := h.w.CreateSession(p.AgentID, p.SessionID, p.TurnCheckpoints)
	if err != nil {
		return nil, err
	}
	return h.session(s), nil
}

func (h workspaceHandlers) sessionGet(_ context.Context, c *Call) (any, error) {
	var p sessionParams
	if err := rpc.DecodeParams(c.Params, &p); err != nil {
		return nil, err
	}
	s, err := h.w.Store.GetSession(p.AgentID, p.SessionID)
	if err != nil {
		return nil, err
	}
	return h.session(s), nil
}

func (h workspaceHandlers) sessionList(_ context.Context, c *Call) (any, error) {
	var p agentParams
	if err := rpc.DecodeParams(c.Params, &p); err != nil {
		return nil, err
	}
	list, err := h.w.Store.ListSessions(p.AgentID)
	if err != nil {
		return nil, err
	}
	out := []rpc.Session{}
	for _, s := range list {
		out = append(out, h.session(s))
	}
	return map[string]any{"sessions": out}, nil
}

func (h workspaceHandlers) sessionDelete(_ context.Context, c *Call) (any, error) {
	var p sessionParams
	if err := rpc.DecodeParams(c.Params, &p); err != nil {
		return nil, err
	}
	return struct{}{}, h.w.DeleteSession(p.AgentID, p.SessionID)
}

func (h workspaceHandlers) sessionRollback(ctx context.Context, c *Call) (any, error) {
	var p struct {
		AgentID       string `json:"agent_id"`
		SessionID     string `json:"session_id"`
		CheckpointID  string `json:"checkpoint_id"`
		KillProcesses *bool  `json:"kill_processes"`
	}
	if err := rpc.DecodeParams(c.Params, &p); err != nil {
		return nil, err
	}
	s, err := h.w.Rollback(ctx, p.AgentID, p.SessionID, p.CheckpointID, p.KillProcesses)
	if err != nil {
		return nil, err
	}
	return h.session(s), nil
}

func (h workspaceHandlers) sessionFence(_ context.Context, c *Call) (any, error) {
	var p struct {
		AgentID   string `json:"agent_id"`
		SessionID string `json:"session_id"`
		Reason    string `json:"reason"`
	}
	if err := rpc.DecodeParams(c.Params, &p); err != nil {
		return nil, err
	}
	if p.Reason == "" {
		return nil, rpc.Errorf(rpc.CodeInvalidParams, "params.reason", "params.reason is required: say why the session is fenced")
	}
	s, err := h.w.Store.GetSession(p.AgentID, p.SessionID)
	if err != nil {
		return nil, err
	}
	if err := h.w.Fences.Fence(p.AgentID, p.SessionID, p.Reason, ""); err != nil {
		return nil, err
	}
	return h.session(s), nil
}

func (h workspaceHandlers) sessionUnfence(_ context.Context, c *Call) (any, error) {
	var p sessionParams
	if err := rpc.DecodeParams(c.Params, &p); err != nil {
		return nil, err
	}
	s, err := h.w.Store.GetSession(p.AgentID, p.SessionID)
	if err != nil {
		return nil, err
	}
	if _, err := h.w.Fences.Unfence(p.AgentID, p.SessionID); err != nil {
		return nil, err
	}
	return h.session(s), nil
}

func (h workspaceHandlers) session(s *store.Session) rpc.Session {
	out := rpc.Session{AgentID: s.AgentID, SessionID: s.ID, Created: s.Created, Current: s.Current, Head: s.Head,
		LiveRuns: h.w.Runs.Active(s.AgentID, s.ID), TurnCheckpoints: h.w.Policy.Enabled(s.AgentID, s.ID)}
	if f, ok := h.w.Fences.Get(s.AgentID, s.ID); ok {
		out.Fenced = &rpc.Fence{Reason: f.Reason, Evidence: f.Evidence, Since: f.Since}
	}
	if q := s.Quarantine; q != nil {
		out.Quarantine = &rpc.Quarantine{Reason: q.Reason, Since: q.Since}
	}
	return out
}
