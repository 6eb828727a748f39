package daemon

import (
	"context"
	"errors"

	"github.com/allox-os/allox/internal/rpc"
	"github.com/allox-os/allox/services/internal/tracker"
	"github.com/allox-os/allox/services/internal/workspace"
)

// RegisterTracker registers process.tree and process.events backed by t; w checks that the
// session exists.
func RegisterTracker(r *Router, w *workspace.Service, t *tracker.Tracker) error {
	var errs []error
	for name, a := range TrackerActions(w, t) {
		errs = append(errs, r.Register(name, a))
	}
	return errors.Join(errs...)
}

// TrackerActions are process.tree and process.events backed by t (the eBPF process-tree plugin
// contributes them; the core registers them for the cgroup source).
func TrackerActions(w *workspace.Service, t *tracker.Tracker) map[string]Action {
	h := trackerHandlers{w: w, t: t}
	return map[string]Action{
		rpc.ActionProcessTree:   {Handler: h.tree, ReadOnly: true},
		rpc.ActionProcessEvents: {Handler: h.events, ReadOnly: true},
	}
}

// RegisterTrackerDisabled registers process.tree and process.events with a handler that says which
// flag enables them, so a client learns the flag rather than "unknown action".
func RegisterTrackerDisabled(r *Router) error {
	off := func(_ context.Context, c *Call) (any, error) {
		return nil, rpc.Errorf(rpc.CodeUnsupported, "action",
			"%s needs the process tracker: start the daemon with --process-tracker (and --process-tree-provider=ebpf for the full history)", c.Action)
	}
	return errors.Join(
		r.Register(rpc.ActionProcessTree, Action{Handler: off, ReadOnly: true}),
		r.Register(rpc.ActionProcessEvents, Action{Handler: off, ReadOnly: true}),
	)
}

type trackerHandlers struct {
	w *workspace.Service
	t *tracker.Tracker
}

type treeParams struct {
	AgentID   string `json:"agent_id"`
	SessionID string `json:"session_id"`
	RunID     string `json:"run_id"`
}

func (h trackerHandlers) tree(_ context.Context, c *Call) (any, error) {
	var p treeParams
	if err := rpc.DecodeParams(c.Params, &p); err != nil {
		return nil, err
	}
	if _, err := h.w.GetSession(p.AgentID, p.SessionID); err != nil {
		return nil, err
	}
	return h.t.Tree(p.AgentID, p.SessionID, p.RunID)
}

func (h trackerHandlers) events(_ context.Context, c *Call) (any, error) {
	var p struct {
		AgentID   string `json:"agent_id"`
		SessionID string `json:"session_id"`
		RunID     string `json:"run_id"`
		Offset    int    `json:"offset"`
		Limit     int    `json:"limit"` // 0 = tracker.DefaultLimit
	}
	if err := rpc.DecodeParams(c.Params, &p); err != nil {
		return nil, err
	}
	if _, err := h.w.GetSession(p.AgentID, p.SessionID); err != nil {
		return nil, err
	}
	return h.t.Events(p.AgentID, p.SessionID, p.RunID, p.Offset, p.Limit)
}
