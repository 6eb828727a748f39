package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"strings"

	"github.com/allox-os/allox/internal/limit"
	"github.com/allox-os/allox/internal/rpc"
	"github.com/allox-os/allox/services/internal/store"
	"github.com/allox-os/allox/services/internal/workspace"
)

func (h workspaceHandlers) sessionCreate(_ context.Context, c *Call) (any, error) {
	var p struct {
		AgentID         string          `json:"agent_id"`
		SessionID       string          `json:"session_id"`
		TurnCheckpoints *bool           `json:"turn_checkpoints"`
		Limits          json.RawMessage `json:"limits"`
		Quota           *int64          `json:"quota"`
	}
	if err := rpc.DecodeParams(c.Params, &p); err != nil {
		return nil, err
	}
	var quota int64
	if p.Quota != nil {
		if *p.Quota <= 0 {
			return nil, rpc.Errorf(rpc.CodeInvalidParams, "params.quota", "params.quota: %d is not a quota; give bytes, or leave quota out for the image's default", *p.Quota)
		}
		quota = *p.Quota
	}
	limits, err := limitsParam(p.Limits)
	if err != nil {
		return nil, err
	}
	s, err := h.w.CreateSessionWith(p.AgentID, p.SessionID, workspace.SessionOptions{TurnCheckpoints: p.TurnCheckpoints, Limits: limits, Quota: quota})
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
	s, err := h.w.GetSession(p.AgentID, p.SessionID)
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
	list, err := h.w.ListSessions(p.AgentID)
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
	s, err := h.w.Fence(p.AgentID, p.SessionID, p.Reason)
	if err != nil {
		return nil, err
	}
	return h.session(s), nil
}

func (h workspaceHandlers) sessionUnfence(_ context.Context, c *Call) (any, error) {
	var p sessionParams
	if err := rpc.DecodeParams(c.Params, &p); err != nil {
		return nil, err
	}
	s, err := h.w.Unfence(p.AgentID, p.SessionID)
	if err != nil {
		return nil, err
	}
	return h.session(s), nil
}

func (h workspaceHandlers) session(s *store.Session) rpc.Session {
	out := rpc.Session{AgentID: s.AgentID, SessionID: s.ID, Created: s.Created, Current: s.Current, Head: s.Head,
		LiveRuns: h.w.ActiveRuns(s.AgentID, s.ID), TurnCheckpoints: h.w.TurnCheckpoints(s.AgentID, s.ID)}
	if f, ok := h.w.FenceOf(s.AgentID, s.ID); ok {
		out.Fenced = &rpc.Fence{Reason: f.Reason, Evidence: f.Evidence, Since: f.Since}
	}
	if _, _, ok := h.w.LimitBounds(); ok {
		if l, err := h.w.SessionLimits(s.AgentID, s.ID); err == nil {
			out.Limits = &l
		}
	}
	if q, ok, err := h.w.SessionQuota(s.AgentID, s.ID); err == nil && ok {
		out.Quota = wireQuota(q)
	}
	if files := h.w.GroupFiles(s.AgentID, s.ID, ""); len(files) > 0 {
		out.CgroupFiles = files
	}
	if q := s.Quarantine; q != nil {
		out.Quarantine = &rpc.Quarantine{Reason: q.Reason, Since: q.Since}
	}
	return out
}

func wireQuota(q store.Quota) *rpc.Quota {
	return &rpc.Quota{Qgroup: q.Qgroup, Limit: q.Limit, Used: q.Used, Reserve: q.Reserve, Unlimited: q.Unlimited}
}

// limitsParam decodes session.create's limits into a limit.Set; an unknown key, a value of the
// wrong type and a 0 where 0 is no limit are refused, naming the field ("params.limits.pids_max").
func limitsParam(raw json.RawMessage) (limit.Set, error) {
	var s limit.Set
	if len(raw) == 0 || string(raw) == "null" {
		return s, nil
	}
	p := &rpc.LimitsParams{}
	if err := rpc.DecodeParams(raw, p); err != nil {
		var re *rpc.Error
		if errors.As(err, &re) {
			re.Field = "params.limits" + strings.TrimPrefix(re.Field, "params")
			re.Message = "params.limits: " + strings.ReplaceAll(re.Message, "params.", "params.limits.")
		}
		return s, err
	}
	for _, f := range []struct {
		name string
		v    *int64
		dst  *int64
	}{{limit.PidsMax, p.PidsMax, &s.PidsMax}, {limit.MemoryMax, p.MemoryMax, &s.MemoryMax}, {limit.CPUWeight, p.CPUWeight, &s.CPUWeight}} {
		if f.v == nil {
			continue
		}
		if *f.v == 0 {
			return s, rpc.Errorf(rpc.CodeInvalidParams, "params.limits."+f.name, "params.limits.%s: 0 is not a limit; leave %s out for the image's default", f.name, f.name)
		}
		*f.dst = *f.v
	}
	s.MemorySwapMax = p.MemorySwapMax
	return s, nil
}
