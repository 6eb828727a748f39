package daemon

import (
	"context"
	"encoding/json"

	"github.com/allox-os/allox/internal/rpc"
	"github.com/allox-os/allox/services/internal/workspace"
)

type turnParams struct {
	AgentID   string `json:"agent_id"`
	SessionID string `json:"session_id"`
	TurnID    string `json:"turn_id"`
}

// turnBegin records the start of an agent turn (the Session/Turn lifecycle event) in the session's
// history; nothing is checkpointed until the turn ends.
func (h workspaceHandlers) turnBegin(_ context.Context, c *Call) (any, error) {
	var p struct {
		turnParams
		Labels map[string]string `json:"labels"`
	}
	if err := rpc.DecodeParams(c.Params, &p); err != nil {
		return nil, err
	}
	s, _, err := h.w.BeginTurn(p.AgentID, p.SessionID, p.TurnID, p.Labels)
	if err != nil {
		return nil, err
	}
	return h.session(s), nil
}

// turnEnd records the end of a turn and checkpoints the session after a successful one when the
// turn policy is on.
func (h workspaceHandlers) turnEnd(_ context.Context, c *Call) (any, error) {
	var p struct {
		turnParams
		Success bool `json:"success"`
	}
	if err := rpc.DecodeParams(c.Params, &p); err != nil {
		return nil, err
	}
	t, cp, err := h.w.EndTurn(p.AgentID, p.SessionID, p.TurnID, p.Success)
	if err != nil {
		return nil, err
	}
	res := map[string]any{"checkpoint": nil, "turn": wireTurn(t)}
	if cp != nil {
		res["checkpoint"] = checkpoint(cp)
	}
	return res, nil
}

// turnList is the session's turn history, oldest first.
func (h workspaceHandlers) turnList(_ context.Context, c *Call) (any, error) {
	var p sessionParams
	if err := rpc.DecodeParams(c.Params, &p); err != nil {
		return nil, err
	}
	turns, err := h.w.Turns(p.AgentID, p.SessionID)
	if err != nil {
		return nil, err
	}
	out := []rpc.Turn{}
	for _, t := range turns {
		out = append(out, wireTurn(t))
	}
	return map[string]any{"turns": out}, nil
}

func wireTurn(t workspace.Turn) rpc.Turn {
	return rpc.Turn{TurnID: t.TurnID, Labels: t.Labels, Begun: t.Begun, Ended: t.Ended, Outcome: t.Outcome, Checkpoint: t.Checkpoint}
}

// policyParam decodes the turn_checkpoints of agent.update and session.update: true, false, or
// null for "follow the level above"; it is required, since it is all an update changes.
func policyParam(raw json.RawMessage) (*bool, error) {
	switch string(raw) {
	case "":
		return nil, rpc.Errorf(rpc.CodeInvalidParams, "params.turn_checkpoints", "params.turn_checkpoints is required: true (checkpoint after every successful turn), false (never), or null (follow the level above)")
	case "null":
		return nil, nil
	case "true", "false":
		v := string(raw) == "true"
		return &v, nil
	}
	return nil, rpc.Errorf(rpc.CodeInvalidParams, "params.turn_checkpoints", "params.turn_checkpoints is %s: use true, false or null (follow the level above)", raw)
}

// updateParams are session.update's.
type updateParams struct {
	AgentID         string          `json:"agent_id"`
	SessionID       string          `json:"session_id"`
	TurnCheckpoints json.RawMessage `json:"turn_checkpoints"`
}

// decodeUpdate decodes into p (agent.update's params lack session_id) and the policy setting.
func decodeUpdate(c *Call, p any, raw func() json.RawMessage) (*bool, error) {
	if err := rpc.DecodeParams(c.Params, p); err != nil {
		return nil, err
	}
	return policyParam(raw())
}

func (h workspaceHandlers) agentUpdate(_ context.Context, c *Call) (any, error) {
	var p struct {
		AgentID         string          `json:"agent_id"`
		TurnCheckpoints json.RawMessage `json:"turn_checkpoints"`
	}
	on, err := decodeUpdate(c, &p, func() json.RawMessage { return p.TurnCheckpoints })
	if err != nil {
		return nil, err
	}
	a, err := h.w.UpdateAgent(p.AgentID, on)
	if err != nil {
		return nil, err
	}
	return h.agent(a), nil
}

func (h workspaceHandlers) sessionUpdate(_ context.Context, c *Call) (any, error) {
	var p updateParams
	on, err := decodeUpdate(c, &p, func() json.RawMessage { return p.TurnCheckpoints })
	if err != nil {
		return nil, err
	}
	s, err := h.w.UpdateSession(p.AgentID, p.SessionID, on)
	if err != nil {
		return nil, err
	}
	return h.session(s), nil
}
