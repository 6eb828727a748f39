package daemon

import (
	"context"
	"errors"
	"fmt"

	"github.com/allox-os/allox/internal/rpc"
	"github.com/allox-os/allox/services/internal/plugin"
	"github.com/allox-os/allox/services/internal/store"
	"github.com/allox-os/allox/services/internal/workspace"
)

// RegisterWorkspace registers the agent, session, checkpoint, process and turn actions backed by w.
// plugins, if not nil, are the open plugins: they take part in every process.start; socks, if
// not nil, gives every run its session's socket (and serves session.info, turn.begin and turn.end
// there).
func RegisterWorkspace(r *Router, w *workspace.Service, plugins *plugin.Loaded, socks *SessionSockets) error {
	h := workspaceHandlers{w: w, plugins: plugins, socks: socks, router: r}
	return errors.Join(
		r.Register(rpc.ActionAgentCreate, Action{Handler: h.agentCreate}),
		r.Register(rpc.ActionAgentGet, Action{Handler: h.agentGet, ReadOnly: true}),
		r.Register(rpc.ActionAgentList, Action{Handler: h.agentList, ReadOnly: true}),
		r.Register(rpc.ActionAgentDelete, Action{Handler: h.agentDelete}),
		r.Register(rpc.ActionAgentUpdate, Action{Handler: h.agentUpdate}),
		r.Register(rpc.ActionSessionCreate, Action{Handler: h.sessionCreate}),
		r.Register(rpc.ActionSessionGet, Action{Handler: h.sessionGet, ReadOnly: true}),
		r.Register(rpc.ActionSessionList, Action{Handler: h.sessionList, ReadOnly: true}),
		r.Register(rpc.ActionSessionDelete, Action{Handler: h.sessionDelete}),
		r.Register(rpc.ActionSessionUpdate, Action{Handler: h.sessionUpdate}),
		r.Register(rpc.ActionSessionRollback, Action{Handler: h.sessionRollback}),
		r.Register(rpc.ActionSessionFence, Action{Handler: h.sessionFence}),
		r.Register(rpc.ActionSessionUnfence, Action{Handler: h.sessionUnfence, Scope: ScopeHost}),
		r.Register(rpc.ActionSessionSSHAgent, Action{Handler: h.sessionSSHAgent, Scope: ScopeHost, Stream: true}),
		r.Register(rpc.ActionSessionSSHAgentConn, Action{Handler: h.sessionSSHAgentConn, Scope: ScopeHost, Stream: true, ReadOnly: true}),
		r.Register(rpc.ActionCheckpointCreate, Action{Handler: h.checkpointCreate}),
		r.Register(rpc.ActionCheckpointGet, Action{Handler: h.checkpointGet, ReadOnly: true}),
		r.Register(rpc.ActionCheckpointList, Action{Handler: h.checkpointList, ReadOnly: true}),
		r.Register(rpc.ActionCheckpointDelete, Action{Handler: h.checkpointDelete}),
		r.Register(rpc.ActionProcessStart, Action{Handler: h.processStart}),
		r.Register(rpc.ActionProcessGet, Action{Handler: h.processGet, ReadOnly: true}),
		r.Register(rpc.ActionProcessWait, Action{Handler: h.processWait, ReadOnly: true}),
		r.Register(rpc.ActionProcessKill, Action{Handler: h.processKill}),
		r.Register(rpc.ActionProcessList, Action{Handler: h.processList, ReadOnly: true}),
		r.Register(rpc.ActionProcessOutput, Action{Handler: h.processOutput, ReadOnly: true}),
		r.Register(rpc.ActionProcessExec, Action{Handler: h.processExec, Stream: true}),
		r.Register(rpc.ActionSessionInfo, Action{Handler: h.sessionInfo, Scope: ScopeSession, ReadOnly: true}),
		r.Register(rpc.ActionTurnBegin, Action{Handler: h.turnBegin, Scope: ScopeControl | ScopeSession}),
		r.Register(rpc.ActionTurnEnd, Action{Handler: h.turnEnd, Scope: ScopeControl | ScopeSession}),
		r.Register(rpc.ActionTurnList, Action{Handler: h.turnList, Scope: ScopeControl | ScopeSession, ReadOnly: true}),
	)
}

type workspaceHandlers struct {
	w       *workspace.Service
	plugins *plugin.Loaded // nil: none
	socks   *SessionSockets
	router  *Router
}

// Params shared by several actions.
type agentParams struct {
	AgentID string `json:"agent_id"`
}

type sessionParams struct {
	AgentID   string `json:"agent_id"`
	SessionID string `json:"session_id"`
}

type checkpointParams struct {
	AgentID      string `json:"agent_id"`
	SessionID    string `json:"session_id"`
	CheckpointID string `json:"checkpoint_id"`
}

func (h workspaceHandlers) agentCreate(_ context.Context, c *Call) (any, error) {
	var p struct {
		AgentID         string `json:"agent_id"`
		TurnCheckpoints *bool  `json:"turn_checkpoints"`
		Shared          string `json:"shared"`
	}
	if err := rpc.DecodeParams(c.Params, &p); err != nil {
		return nil, err
	}
	switch p.Shared {
	case "", rpc.SharedReadOnly, rpc.SharedReadWrite:
	default:
		return nil, &rpc.Error{Code: rpc.CodeInvalidParams, Field: "params.shared", Choices: []string{rpc.SharedReadOnly, rpc.SharedReadWrite},
			Message: fmt.Sprintf("params.shared %q: use \"ro\" (runs read the agent's shared/, the default) or \"rw\" (runs may write it; it is outside every rollback)", p.Shared)}
	}
	a, err := h.w.CreateAgentWith(p.AgentID, workspace.AgentOptions{TurnCheckpoints: p.TurnCheckpoints, SharedWritable: p.Shared == rpc.SharedReadWrite})
	if err != nil {
		return nil, err
	}
	return h.agent(a), nil
}

func (h workspaceHandlers) agentGet(_ context.Context, c *Call) (any, error) {
	var p agentParams
	if err := rpc.DecodeParams(c.Params, &p); err != nil {
		return nil, err
	}
	a, err := h.w.GetAgent(p.AgentID)
	if err != nil {
		return nil, err
	}
	return h.agent(a), nil
}

func (h workspaceHandlers) agentList(_ context.Context, c *Call) (any, error) {
	if err := rpc.DecodeParams(c.Params, &struct{}{}); err != nil {
		return nil, err
	}
	list, err := h.w.ListAgents()
	if err != nil {
		return nil, err
	}
	out := []rpc.Agent{}
	for _, a := range list {
		out = append(out, h.agent(a))
	}
	return map[string]any{"agents": out}, nil
}

func (h workspaceHandlers) agentDelete(_ context.Context, c *Call) (any, error) {
	var p agentParams
	if err := rpc.DecodeParams(c.Params, &p); err != nil {
		return nil, err
	}
	return struct{}{}, h.w.DeleteAgent(p.AgentID)
}

func (h workspaceHandlers) agent(a *store.Agent) rpc.Agent {
	out := rpc.Agent{AgentID: a.ID, Created: a.Created, Workspace: a.Workspace, Shared: a.Shared,
		SharedMode: rpc.SharedReadOnly, TurnCheckpoints: h.w.TurnCheckpoints(a.ID, "")}
	if h.w.SharedWritable(a.ID) {
		out.SharedMode = rpc.SharedReadWrite
	}
	if q, ok, err := h.w.AgentQuota(a.ID); err == nil && ok {
		out.Quota = wireQuota(q)
	}
	return out
}
