package daemon

import (
	"context"

	"github.com/allox-os/allox/internal/rpc"
	"github.com/allox-os/allox/services/internal/store"
)

func (h workspaceHandlers) checkpointCreate(_ context.Context, c *Call) (any, error) {
	var p struct {
		AgentID      string            `json:"agent_id"`
		SessionID    string            `json:"session_id"`
		CheckpointID string            `json:"checkpoint_id"`
		Labels       map[string]string `json:"labels"`
		Pin          bool              `json:"pin"`
	}
	if err := rpc.DecodeParams(c.Params, &p); err != nil {
		return nil, err
	}
	cp, err := h.w.CreateCheckpoint(p.AgentID, p.SessionID, p.CheckpointID, store.CheckpointOptions{Labels: p.Labels, Pin: p.Pin})
	if err != nil {
		return nil, err
	}
	return checkpoint(cp), nil
}

func (h workspaceHandlers) checkpointGet(_ context.Context, c *Call) (any, error) {
	var p checkpointParams
	if err := rpc.DecodeParams(c.Params, &p); err != nil {
		return nil, err
	}
	cp, err := h.w.GetCheckpoint(p.AgentID, p.SessionID, p.CheckpointID)
	if err != nil {
		return nil, err
	}
	return checkpoint(cp), nil
}

func (h workspaceHandlers) checkpointList(_ context.Context, c *Call) (any, error) {
	var p sessionParams
	if err := rpc.DecodeParams(c.Params, &p); err != nil {
		return nil, err
	}
	list, err := h.w.ListCheckpoints(p.AgentID, p.SessionID)
	if err != nil {
		return nil, err
	}
	out := []rpc.Checkpoint{}
	for _, cp := range list {
		out = append(out, checkpoint(cp))
	}
	return map[string]any{"checkpoints": out}, nil
}

func (h workspaceHandlers) checkpointDelete(_ context.Context, c *Call) (any, error) {
	var p checkpointParams
	if err := rpc.DecodeParams(c.Params, &p); err != nil {
		return nil, err
	}
	return struct{}{}, h.w.DeleteCheckpoint(p.AgentID, p.SessionID, p.CheckpointID)
}

func checkpoint(cp *store.Checkpoint) rpc.Checkpoint {
	return rpc.Checkpoint{AgentID: cp.AgentID, SessionID: cp.SessionID, CheckpointID: cp.ID, Parent: cp.Parent,
		Labels: cp.Labels, Pinned: cp.Pinned, Created: cp.Created}
}
