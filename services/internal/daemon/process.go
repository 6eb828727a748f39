package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
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
		// Managed runs without bubblewrap (the seed's managed path); needs --managed-execution.
		Managed bool `json:"managed"`
		// Owned by the system-effects observer (RunHook); refused when it is not enabled.
		Recovery     json.RawMessage `json:"recovery"`
		CheckpointID *string         `json:"checkpoint_id"`
	}
	if err := rpc.DecodeParams(c.Params, &p); err != nil {
		return nil, err
	}
	timeout, err := timeoutParam(p.Timeout)
	if err != nil {
		return nil, err
	}
	rp, err := decodeRunParams(p.Recovery, p.CheckpointID)
	if err != nil {
		return nil, err
	}
	req := tracked.StartRequest{AgentID: p.AgentID, SessionID: p.SessionID, Argv: p.Argv,
		Env: p.Env, Cwd: p.Cwd, Stdin: []byte(p.Stdin), Timeout: timeout,
		Managed: p.Managed}
	var undo func()
	switch {
	case h.hook != nil:
		if undo, err = h.hook.Prepare(ctx, &req, rp); err != nil {
			return nil, err
		}
	case rp.Recovery != nil:
		return nil, rpc.Errorf(rpc.CodeInvalidParams, "params.recovery", errNoObserver)
	case rp.CheckpointID != "":
		return nil, rpc.Errorf(rpc.CodeInvalidParams, "params.checkpoint_id", errNoObserver)
	}
	if req.Extra, err = h.sessionExtra(req); err != nil {
		if undo != nil {
			undo()
		}
		return nil, err
	}
	st, err := h.w.StartProcess(ctx, req)
	if err != nil {
		if undo != nil {
			undo()
		}
		return nil, err
	}
	return run(st), nil
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

const errNoObserver = "recovery and checkpoint_id belong to the system-effects observer, which this daemon does not run: " +
	"start it with --observer (the image needs plugins = [\"system-effects\"] on the daemon) or leave them out"

// RunHook is a plugin's part in process.start (Plugin API v1: run metadata). The system-effects
// observer is one: it owns the recovery and checkpoint_id params, may refuse the request, and
// attaches an observer to the run (req.Observer).
type RunHook interface {
	// Prepare is called before the run starts. undo, if not nil, is called when the start fails
	// afterwards, so that a failed request leaves everything as it was.
	Prepare(ctx context.Context, req *tracked.StartRequest, p RunParams) (undo func(), err error)
}

// RunParams are the process.start params a RunHook owns.
type RunParams struct {
	Recovery     *rpc.Recovery // nil: protocol v2
	CheckpointID string        // "" when omitted
}

func decodeRunParams(recovery json.RawMessage, checkpoint *string) (RunParams, error) {
	var rp RunParams
	if checkpoint != nil {
		if *checkpoint == "" {
			return rp, rpc.Errorf(rpc.CodeInvalidParams, "params.checkpoint_id",
				"params.checkpoint_id is empty: name a full, existing checkpoint id or leave it out for a fresh baseline")
		}
		rp.CheckpointID = *checkpoint
	}
	if len(bytes.TrimSpace(recovery)) == 0 || string(bytes.TrimSpace(recovery)) == "null" {
		return rp, nil
	}
	var r rpc.Recovery
	dec := json.NewDecoder(bytes.NewReader(recovery))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return rp, rpc.Errorf(rpc.CodeInvalidParams, "params.recovery."+te.Field,
				"params.recovery.%s must be a JSON %s", te.Field, jsonKind(te.Type.Kind().String()))
		}
		return rp, rpc.Errorf(rpc.CodeInvalidParams, "params.recovery",
			"params.recovery must be an object with scrub_runtime and require_consistent (booleans): %v", err)
	}
	rp.Recovery = &r
	return rp, nil
}

func jsonKind(goKind string) string {
	if goKind == "ptr" || goKind == "bool" {
		return "boolean"
	}
	return goKind
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
	timeout, err := timeoutParam(p.Timeout)
	if err != nil {
		return nil, err
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
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
	data, next, eof, err := h.w.Runs.Output(p.RunID, p.Stream, p.Offset, p.Limit)
	if err != nil {
		return nil, err
	}
	dropped, err := h.w.Runs.Dropped(p.RunID, p.Stream)
	if err != nil {
		return nil, err
	}
	out := rpc.Output{RunID: p.RunID, Stream: p.Stream, Offset: p.Offset, Next: next, EOF: eof,
		Truncated: dropped > 0, DroppedBytes: dropped}
	out.Data, out.Encoding, out.Next = encodeOutput(data, p.Encoding, p.Offset, next, eof)
	return out, nil
}

func run(st *tracked.Status) rpc.Run {
	r := rpc.Run{RunID: st.RunID, AgentID: st.AgentID, SessionID: st.SessionID, Argv: st.Argv, State: st.State,
		Signal: st.Signal, Reason: st.Reason, Pid: st.Pid, Cgroup: st.Cgroup, Started: st.Started, Managed: st.Managed,
		StdoutDropped: st.StdoutDropped, StderrDropped: st.StderrDropped}
	if st.State != "running" {
		code := st.ExitCode
		r.ExitCode = &code
	}
	if !st.Ended.IsZero() {
		ended := st.Ended
		r.Ended = &ended
	}
	if len(st.Effects) > 0 {
		var e rpc.Effects
		if err := json.Unmarshal(st.Effects, &e); err != nil {
			// Never report unreadable evidence as anything but inconclusive.
			e = rpc.Effects{Verdict: rpc.VerdictInconclusive, Evidence: rpc.EvidenceIncomplete,
				Reason: "the observer's report does not decode: " + err.Error()}
		}
		r.Effects = &e
	}
	return r
}
