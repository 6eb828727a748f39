package daemon

import (
	"context"
	"encoding/json"
	"maps"
	"time"

	"github.com/allox-os/allox/internal/rpc"
	"github.com/allox-os/allox/services/internal/plugin"
	"github.com/allox-os/allox/services/internal/tracked"
)

type runParams struct {
	RunID string `json:"run_id"`
}

// startParams are process.start's own params (the plugins' are taken out first).
type startParams struct {
	AgentID   string            `json:"agent_id"`
	SessionID string            `json:"session_id"`
	Argv      []string          `json:"argv"`
	Env       map[string]string `json:"env"`
	Cwd       string            `json:"cwd"`
	Stdin     string            `json:"stdin"`
	Timeout   float64           `json:"timeout"` // seconds; 0 = none
	// Managed runs without bubblewrap (the seed's managed path); needs --managed-execution.
	Managed bool `json:"managed"`
	// SSHAgent binds the session's forwarded SSH agent of this id (session.ssh_agent) into the
	// run, SSH_AUTH_SOCK naming it.
	SSHAgent string `json:"ssh_agent"`
}

func (p *startParams) start() *startParams { return p }

// StartParamNames are process.start's own params, which no plugin may own.
func StartParamNames() []string { names, _ := rpc.ParamNames(&startParams{}); return names }

func (h workspaceHandlers) processStart(ctx context.Context, c *Call) (any, error) {
	var p startParams
	req, undo, err := h.startRequest(ctx, c, &p)
	if err != nil {
		return nil, err
	}
	st, err := h.w.StartProcess(ctx, req)
	if err != nil {
		undo()
		return nil, err
	}
	return run(st), nil
}

// startRequest decodes a run's params into p (process.start's, or a struct embedding them) once
// the plugins' are taken out, and makes the run's request with the plugins' and the session
// socket's additions. undo undoes what the plugins did for it when the run does not start.
func (h workspaceHandlers) startRequest(ctx context.Context, c *Call, into interface{ start() *startParams }) (tracked.StartRequest, func(), error) {
	raw, owned, err := h.takePluginParams(c.Params, (*plugin.Loaded).TakeStartParams)
	if err != nil {
		return tracked.StartRequest{}, nil, err
	}
	if err := rpc.DecodeParams(raw, into); err != nil {
		return tracked.StartRequest{}, nil, err
	}
	p := into.start()
	timeout, err := timeoutParam(p.Timeout)
	if err != nil {
		return tracked.StartRequest{}, nil, err
	}
	req := tracked.StartRequest{AgentID: p.AgentID, SessionID: p.SessionID, Argv: p.Argv,
		Env: p.Env, Cwd: p.Cwd, Stdin: []byte(p.Stdin), Timeout: timeout,
		Managed: p.Managed}
	undo := func() {}
	if h.plugins != nil {
		req.Extra = h.plugins.Extra()
		base := plugin.RunStart{AgentID: p.AgentID, SessionID: p.SessionID, Managed: p.Managed, Argv: p.Argv, Env: p.Env}
		run, err := h.plugins.StartRun(ctx, base, owned)
		if err != nil {
			return tracked.StartRequest{}, nil, err
		}
		req.Hooks = run.Hooks
		if run.Undo != nil {
			undo = run.Undo
		}
		if len(run.Env) > 0 && req.Extra.Env == nil {
			req.Extra.Env = map[string]string{}
		}
		maps.Copy(req.Extra.Env, run.Env)
		req.Extra.NetNS = run.NetNS
	}
	if req.Extra, err = h.sessionExtra(req); err != nil {
		undo()
		return tracked.StartRequest{}, nil, err
	}
	if p.SSHAgent != "" {
		agent, err := h.socks.sshAgentExtra(SessionRef{AgentID: p.AgentID, SessionID: p.SessionID}, p.SSHAgent, p.Managed)
		if err != nil {
			undo()
			return tracked.StartRequest{}, nil, err
		}
		if _, set := p.Env["SSH_AUTH_SOCK"]; set {
			undo()
			return tracked.StartRequest{}, nil, rpc.Errorf(rpc.CodeInvalidParams, "params.env.SSH_AUTH_SOCK", "params.ssh_agent sets SSH_AUTH_SOCK: leave it out of params.env")
		}
		req.Extra.Env = withEnv(req.Extra.Env, "SSH_AUTH_SOCK", agent.Env["SSH_AUTH_SOCK"])
		req.Extra.Mounts = append(req.Extra.Mounts, agent.Mounts...)
	}
	return req, undo, nil
}

// takePluginParams takes the plugins' params out of an action's params (take: process.start's or
// session.create's) and returns the rest, re-encoded, with what each plugin owns.
func (h workspaceHandlers) takePluginParams(params json.RawMessage, take func(*plugin.Loaded, map[string]json.RawMessage) (map[string]map[string]json.RawMessage, error)) (json.RawMessage, map[string]map[string]json.RawMessage, error) {
	if h.plugins == nil {
		return params, nil, nil
	}
	var all map[string]json.RawMessage
	if err := rpc.DecodeParams(params, &all); err != nil { // a JSON object, each key once
		return nil, nil, err
	}
	owned, err := take(h.plugins, all)
	if err != nil || owned == nil {
		return params, nil, err
	}
	rest, err := json.Marshal(all)
	return rest, owned, err
}

// maxTimeout is the longest timeout process.start and process.wait accept.
const maxTimeout = 168 * time.Hour

// timeoutParam converts params.timeout (seconds; 0 = none) to a duration. It refuses what would
// silently mean something else: a negative value, one so small it rounds to no timeout at all,
// and one beyond maxTimeout (which would also overflow a time.Duration).
func timeoutParam(secs float64) (time.Duration, error) {
	const field = "params.timeout"
	switch {
	case secs < 0:
		return 0, rpc.Errorf(rpc.CodeInvalidParams, field, "params.timeout is in seconds and must not be negative: use 0 for none")
	case secs > maxTimeout.Seconds():
		return 0, rpc.Errorf(rpc.CodeInvalidParams, field, "params.timeout %g s is beyond the maximum of %.0f s (168 h): use at most %.0f, or 0 for none", secs, maxTimeout.Seconds(), maxTimeout.Seconds())
	}
	d := time.Duration(secs * float64(time.Second))
	if secs > 0 && d <= 0 {
		return 0, rpc.Errorf(rpc.CodeInvalidParams, field, "params.timeout %g s rounds to no timeout at all: use at least 1e-9 (one nanosecond), or 0 for none", secs)
	}
	return d, nil
}

func (h workspaceHandlers) processGet(_ context.Context, c *Call) (any, error) {
	var p runParams
	if err := rpc.DecodeParams(c.Params, &p); err != nil {
		return nil, err
	}
	st, err := h.w.Run(p.RunID)
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
	timeout, err := timeoutParam(p.Timeout)
	if err != nil {
		return nil, err
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	st, err := h.w.WaitRun(ctx, p.RunID)
	if err != nil && ctx.Err() != nil && st == nil {
		// The wait timed out: report the run as it is now.
		st, err = h.w.Run(p.RunID)
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
	if err := h.w.KillRun(p.RunID); err != nil {
		return nil, err
	}
	st, err := h.w.Run(p.RunID)
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
	if _, err := h.w.GetSession(p.AgentID, p.SessionID); err != nil {
		return nil, err
	}
	list, err := h.w.ListRuns(p.AgentID, p.SessionID)
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
		RunID    string `json:"run_id"`
		Stream   string `json:"stream"`
		Offset   int64  `json:"offset"`
		Limit    int64  `json:"limit"`
		Encoding string `json:"encoding"`
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
	switch p.Encoding {
	case "":
		p.Encoding = rpc.EncodingAuto
	case rpc.EncodingAuto, rpc.EncodingBase64:
	default:
		return nil, &rpc.Error{Code: rpc.CodeInvalidParams, Field: "params.encoding", Choices: []string{rpc.EncodingAuto, rpc.EncodingBase64},
			Message: "params.encoding must be \"auto\" (the default: text when the page is valid UTF-8, else base64) or \"base64\""}
	}
	if p.Limit <= 0 || p.Limit > maxOutputPage {
		p.Limit = maxOutputPage
	}
	data, next, eof, err := h.w.RunOutput(p.RunID, p.Stream, p.Offset, p.Limit)
	if err != nil {
		return nil, err
	}
	dropped, err := h.w.RunDropped(p.RunID, p.Stream)
	if err != nil {
		return nil, err
	}
	out := rpc.Output{RunID: p.RunID, Stream: p.Stream, Offset: p.Offset, Next: next, EOF: eof,
		Truncated: dropped > 0, DroppedBytes: dropped}
	out.Data, out.Encoding, out.Next = encodeOutput(data, p.Encoding, p.Offset, next, eof)
	return out, nil
}

// effectsPlugin is the plugin whose run metadata keeps the place and shape it had before Plugin API
// v1: process.get's "effects" (every other plugin's is under "plugins").
const effectsPlugin = "system-effects"

func run(st *tracked.Status) rpc.Run {
	r := rpc.Run{RunID: st.RunID, AgentID: st.AgentID, SessionID: st.SessionID, Argv: st.Argv, State: st.State,
		Signal: st.Signal, Reason: st.Reason, Pid: st.Pid, Cgroup: st.Cgroup, Started: st.Started, Managed: st.Managed, Attached: st.Attached,
		StdoutDropped: st.StdoutDropped, StderrDropped: st.StderrDropped}
	if st.State != "running" {
		code := st.ExitCode
		r.ExitCode = &code
	}
	if !st.Ended.IsZero() {
		ended := st.Ended
		r.Ended = &ended
	}
	effects := st.Effects // a record written before Plugin API v1
	for name, meta := range st.Meta {
		if name == effectsPlugin {
			effects = meta
			continue
		}
		if r.Plugins == nil {
			r.Plugins = map[string]json.RawMessage{}
		}
		r.Plugins[name] = meta
	}
	if len(effects) > 0 {
		var e rpc.Effects
		if err := json.Unmarshal(effects, &e); err != nil {
			// Never report unreadable evidence as anything but inconclusive.
			e = rpc.Effects{Verdict: rpc.VerdictInconclusive, Evidence: rpc.EvidenceIncomplete,
				Reason: "the observer's report does not decode: " + err.Error()}
		}
		r.Effects = &e
	}
	return r
}
