package daemon

import (
	"context"

	"github.com/allox-os/allox/internal/rpc"
)

type turnParams struct {
	AgentID   string `json:"agent_id"`
	SessionID string `json:"session_id"`
	TurnID    string `json:"turn_id"`
}

// turnBegin acknowledges the start of an agent turn (the Session/Turn lifecycle event); nothing is
// checkpointed until the turn ends.
func (h workspaceHandlers) turnBegin(_ context.Context, c *Call) (any, error) {
	var p turnParams
	if err := rpc.DecodeParams(c.Params, &p); err != nil {
		return nil, err
	}
	s, err := h.w.BeginTurn(p.AgentID, p.SessionID, p.TurnID)
	if err != nil {
		return nil, err
	}
	return h.session(s), nil
}

// turnEnd checkpoints the session after a successful turn when the turn policy is on.
func (h workspaceHandlers) turnEnd(_ context.Context, c *Call) (any, error) {
	var p struct {
		turnParams
		Success bool `json:"success"`
	}
	if err := rpc.DecodeParams(c.Params, &p); err != nil {
		return nil, err
	}
	cp, err := h.w.EndTurn(p.AgentID, p.SessionID, p.TurnID, p.Success)
	if err != nil {
		return nil, err
	}
	res := map[string]any{"checkpoint": nil}
	if cp != nil {
		res["checkpoint"] = checkpoint(cp)
	}
	return res, nil
}
