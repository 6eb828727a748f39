package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"strings"

	"github.com/allox-os/allox/internal/limit"
	"github.com/allox-os/allox/internal/rpc"
	"github.com/allox-os/allox/services/internal/audit"
	"github.com/allox-os/allox/services/internal/plugin"
	"github.com/allox-os/allox/services/internal/store"
	"github.com/allox-os/allox/services/internal/tracked"
	"github.com/allox-os/allox/services/internal/workspace"
)

func (h workspaceHandlers) sessionCreate(ctx context.Context, c *Call) (any, error) {
	raw, owned, err := h.takePluginParams(c.Params, (*plugin.Loaded).TakeSessionParams)
	if err != nil {
		return nil, err
	}
	var p struct {
		AgentID         string          `json:"agent_id"`
		SessionID       string          `json:"session_id"`
		TurnCheckpoints *bool           `json:"turn_checkpoints"`
		Limits          json.RawMessage `json:"limits"`
		Quota           *int64          `json:"quota"`
	}
	if err := rpc.DecodeParams(raw, &p); err != nil {
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
	if h.plugins != nil {
		if err := h.plugins.CreateSession(ctx, p.AgentID, p.SessionID, owned); err != nil {
			return nil, errors.Join(err, h.w.DeleteSession(p.AgentID, p.SessionID))
		}
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
	if err := h.w.DeleteSession(p.AgentID, p.SessionID); err != nil {
		return nil, err
	}
	if h.plugins != nil {
		// The session is gone: what a plugin fails to drop is its leftover (cleared at its next
		// start), recorded, not the caller's failure.
		if err := h.plugins.SessionDeleted(p.AgentID, p.SessionID); err != nil {
			h.w.Record(audit.Entry{Action: rpc.ActionSessionDelete, AgentID: p.AgentID, SessionID: p.SessionID,
				Outcome: "internal", Error: err.Error(), Detail: "plugins' leftovers of the deleted session"})
		}
	}
	// The session is gone: a socket that cannot be removed is the daemon's leftover, cleared
	// at its next start, not the caller's failure.
	_ = h.socks.Remove(p.AgentID, p.SessionID)
	return struct{}{}, nil
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
	if h.plugins != nil {
		out.Plugins = h.plugins.SessionInfo(s.AgentID, s.ID)
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

// sessionInfo is the caller's session (session socket only; the router has bound the ids to
// the caller's).
func (h workspaceHandlers) sessionInfo(_ context.Context, c *Call) (any, error) {
	var p sessionParams
	if err := rpc.DecodeParams(c.Params, &p); err != nil {
		return nil, err
	}
	s, err := h.w.GetSession(p.AgentID, p.SessionID)
	if err != nil {
		return nil, err
	}
	a, err := h.w.GetAgent(p.AgentID)
	if err != nil {
		return nil, err
	}
	sess := h.session(s)
	return rpc.SessionInfo{AgentID: s.AgentID, SessionID: s.ID, Current: s.Current, AgentWorkspace: a.Workspace,
		Shared: a.Shared, Head: s.Head, TurnCheckpoints: sess.TurnCheckpoints, Fenced: sess.Fenced,
		Socket: SessionSocketTarget, Actions: h.router.ActionsOn(Session)}, nil
}

// sessionExtra adds the session's socket, the client and the shims to a run of an existing
// session (SessionSockets.Extra). A socket made for a session deleted meanwhile is the daemon's
// leftover until its next start; the run itself fails in StartProcess.
func (h workspaceHandlers) sessionExtra(req tracked.StartRequest) (tracked.Extra, error) {
	x := req.Extra
	if h.socks == nil {
		return x, nil
	}
	if _, err := h.w.GetSession(req.AgentID, req.SessionID); err != nil {
		return x, err
	}
	own, err := h.socks.Extra(req.AgentID, req.SessionID, req.Managed)
	if err != nil {
		return x, err
	}
	if x.Env == nil && len(own.Env) > 0 {
		x.Env = map[string]string{}
	}
	for k, v := range own.Env {
		x.Env[k] = v
	}
	x.Mounts = append(x.Mounts, own.Mounts...)
	return x, nil
}
