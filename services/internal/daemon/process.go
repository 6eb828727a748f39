package daemon

import (
	"context"
	"time"

	"github.com/allox-os/allox/internal/rpc"
	"github.com/allox-os/allox/services/internal/tracked"
)

type runParams struct {
	RunID string `json:"run_id"`
}

func (h workspaceHandlers) processStart(ctx context.Context, c *Call) (any, error) {
	var p struct {
		AgentID   string            `json:"agent_id"`
		SessionID string            `json:"session_id"`
		Argv      []string          `json:"argv"`
		Env       map[string]string `json:"env"`
		Cwd       string            `json:"cwd"`
		Stdin     string            `json:"stdin"`
		Timeout   float64           `json:"timeout"` // seconds; 0 = none
	}
	if err := rpc.DecodeParams(c.Params, &p); err != nil {
		return nil, err
	}
	if p.Timeout < 0 {
		return nil, rpc.Errorf(rpc.CodeInvalidParams, "params.timeout", "params.timeout is in seconds and must not be negative")
	}
	st, err := h.w.StartProcess(ctx, tracked.StartRequest{AgentID: p.AgentID, SessionID: p.SessionID, Argv: p.Argv,
		Env: p.Env, Cwd: p.Cwd, Stdin: []byte(p.Stdin), Timeout: time.Duration(p.Timeout * float64(time.Second))})
	if err != nil {
		return nil, err
	}
	return run(st), nil
}

func (h workspaceHandlers) processGet(_ context.Context, c *Call) (any, error) {
	var p runParams
	if err := rpc.DecodeParams(c.Params, &p); err != nil {
		return nil, err
	}
	st, err := h.w.Runs.Get(p.RunID)
	if err != nil {
		return nil, err
	}
	return run(st), nil
}

func (h workspaceHandlers) processWait(ctx context.Context, c *Call) (any, error) {
	var p struct {
		RunID   string  `json:"run_id"`
		Timeout float64 `json:"timeout"` // seconds to wait; 0 = until the run ends or the request is cancelled
	}
	if err := rpc.DecodeParams(c.Params, &p); err != nil {
		return nil, err
	}
	if p.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(p.Timeout*float64(time.Second)))
		defer cancel()
	}
	st, err := h.w.Runs.Wait(ctx, p.RunID)
	if err != nil && ctx.Err() != nil && st == nil {
		// The wait timed out: report the run as it is now.
		st, err = h.w.Runs.Get(p.RunID)
	}
	if err != nil {
		return nil, err
	}
	return run(st), nil
}

func (h workspaceHandlers) processKill(_ context.Context, c *Call) (any, error) {
	var p runParams
	if err := rpc.DecodeParams(c.Params, &p); err != nil {
		return nil, err
	}
	if err := h.w.Runs.Kill(p.RunID); err != nil {
		return nil, err
	}
	st, err := h.w.Runs.Get(p.RunID)
	if err != nil {
		return nil, err
	}
	return run(st), nil
}

func (h workspaceHandlers) processList(_ context.Context, c *Call) (any, error) {
	var p sessionParams
	if err := rpc.DecodeParams(c.Params, &p); err != nil {
		return nil, err
	}
	if _, err := h.w.Store.GetSession(p.AgentID, p.SessionID); err != nil {
		return nil, err
	}
	list, err := h.w.Runs.List(p.AgentID, p.SessionID)
	if err != nil {
		return nil, err
	}
	out := []rpc.Run{}
	for _, st := range list {
		out = append(out, run(st))
	}
	return map[string]any{"runs": out}, nil
}

// maxOutputPage bounds one process.output reply.
const maxOutputPage = 256 << 10

func (h workspaceHandlers) processOutput(_ context.Context, c *Call) (any, error) {
	var p struct {
		RunID  string `json:"run_id"`
		Stream string `json:"stream"`
		Offset int64  `json:"offset"`
		Limit  int64  `json:"limit"`
	}
	if err := rpc.DecodeParams(c.Params, &p); err != nil {
		return nil, err
	}
	if p.Stream == "" {
		p.Stream = "stdout"
	}
	if p.Stream != "stdout" && p.Stream != "stderr" {
		return nil, &rpc.Error{Code: rpc.CodeInvalidParams, Field: "params.stream", Choices: []string{"stderr", "stdout"},
			Message: "params.stream must be \"stdout\" or \"stderr\""}
	}
	if p.Limit <= 0 || p.Limit > maxOutputPage {
		p.Limit = maxOutputPage
	}
	data, next, eof, err := h.w.Runs.Output(p.RunID, p.Stream, p.Offset, p.Limit)
	if err != nil {
		return nil, err
	}
	return rpc.Output{RunID: p.RunID, Stream: p.Stream, Offset: p.Offset, Next: next, EOF: eof, Data: string(data)}, nil
}

func run(st *tracked.Status) rpc.Run {
	r := rpc.Run{RunID: st.RunID, AgentID: st.AgentID, SessionID: st.SessionID, Argv: st.Argv, State: st.State,
		Signal: st.Signal, Reason: st.Reason, Pid: st.Pid, Cgroup: st.Cgroup, Started: st.Started}
	if st.State != "running" {
		code := st.ExitCode
		r.ExitCode = &code
	}
	if !st.Ended.IsZero() {
		ended := st.Ended
		r.Ended = &ended
	}
	return r
}
