package monitor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/allox-os/allox/internal/cgroup"
	"github.com/allox-os/allox/internal/rpc"
	"github.com/allox-os/allox/services/internal/plugin"
	"github.com/allox-os/allox/services/internal/tracked"
)

// traceParent is a W3C trace context's traceparent: version-traceid-parentid-flags.
type traceParent struct{ traceID, spanID string }

// parseTraceParent accepts "00-<32 hex>-<16 hex>-<2 hex>" with non-zero ids (W3C Trace Context).
func parseTraceParent(s string) (traceParent, error) {
	if len(s) != 55 || s[2] != '-' || s[35] != '-' || s[52] != '-' {
		return traceParent{}, fmt.Errorf("%q is not version-traceid-spanid-flags, e.g. 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", s)
	}
	tp := traceParent{traceID: s[3:35], spanID: s[36:52]}
	for _, part := range []string{s[0:2], tp.traceID, tp.spanID, s[53:55]} {
		if _, err := hex.DecodeString(part); err != nil || part != lowerHex(part) {
			return traceParent{}, fmt.Errorf("%q: %q is not lower-case hex", s, part)
		}
	}
	if s[0:2] == "ff" || tp.traceID == "00000000000000000000000000000000" || tp.spanID == "0000000000000000" {
		return traceParent{}, fmt.Errorf("%q: version ff and all-zero ids are invalid", s)
	}
	return tp, nil
}

func lowerHex(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'F' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// run takes part in every process.start: the session's receiver in the run's environment, and
// the run's link to the span (or turn) that caused it.
func (m *Monitor) run(_ context.Context, r *plugin.RunStart) (plugin.RunHook, error) {
	k := key{r.AgentID, r.SessionID}
	h := &runHook{m: m, k: k}
	if raw, ok := r.Params["traceparent"]; ok {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, rpc.Errorf(rpc.CodeInvalidParams, "params.traceparent", "params.traceparent must be a string, the W3C traceparent of the span that starts the run")
		}
		tp, err := parseTraceParent(s)
		if err != nil {
			return nil, rpc.Errorf(rpc.CodeInvalidParams, "params.traceparent", "params.traceparent %v", err)
		}
		h.tp, h.link = tp, "traceparent"
	} else if s, ok := r.Env["TRACEPARENT"]; ok {
		if tp, err := parseTraceParent(s); err == nil {
			h.tp, h.link = tp, "env"
		}
	}
	port, err := m.port(k)
	if err != nil {
		return nil, err
	}
	var once sync.Once
	h.started = func(failed bool) { once.Do(func() { m.started(k, failed) }) }
	r.OnFailure(func() { h.started(true) })
	if err := r.SetEnv(EnvEndpoint, "http://127.0.0.1:"+strconv.Itoa(port)); err != nil {
		return nil, err
	}
	if err := r.SetEnv(EnvProtocol, Protocol); err != nil {
		return nil, err
	}
	return h, nil
}

// runHook follows one run: its receiver in the run's namespace at Begin, its record at End.
type runHook struct {
	m       *Monitor
	started func(failed bool) // once: the run has begun, or failed to start
	k       key
	tp      traceParent
	link    string
	turn    string
	start   time.Time
}

// runMeta is the plugin's metadata on a run (process.get's meta.monitor).
type runMeta struct {
	TraceID      string        `json:"trace_id,omitempty"`
	ParentSpanID string        `json:"parent_span_id,omitempty"`
	TurnID       string        `json:"turn_id,omitempty"`
	Link         string        `json:"link,omitempty"`
	Usage        *cgroup.Usage `json:"usage,omitempty"`
}

func (h *runHook) meta(u *cgroup.Usage) json.RawMessage {
	out, _ := json.Marshal(runMeta{TraceID: h.tp.traceID, ParentSpanID: h.tp.spanID, TurnID: h.turn, Link: h.link, Usage: u})
	return out
}

// Begin opens the session's receiver inside the run's network namespace before its command runs,
// and notes the turn open now.
func (h *runHook) Begin(st *tracked.Status) (json.RawMessage, error) {
	h.start = st.Started
	if h.start.IsZero() {
		h.start = time.Now().UTC()
	}
	if st.Pid > 0 {
		err := h.m.enterNS(h.k, st.Pid, filepath.Dir(st.Cgroup)) // the run's group is below its session's
		h.started(err != nil)
		if err != nil {
			return nil, err
		}
	} else {
		h.started(false)
	}
	turns, _ := h.m.turns.Turns(h.k.agent, h.k.session)
	h.turn = turnAt(turns, h.start)
	if h.link == "" && h.turn != "" {
		h.link = "turn"
	}
	return h.meta(nil), nil
}

// End records the run with what its cgroup used (the group is empty but in place).
func (h *runHook) End(st *tracked.Status, _ error) (json.RawMessage, error) {
	var usage *cgroup.Usage
	if g, err := cgroup.At(st.Cgroup); err == nil {
		if u, err := g.Usage(); err == nil {
			usage = &u
		}
	}
	end := st.Ended
	if end.IsZero() {
		end = time.Now().UTC()
	}
	rec := Record{Kind: KindRun, RunID: st.RunID, Argv: st.Argv, Name: runName(st.Argv), Start: h.start, End: end,
		TraceID: h.tp.traceID, ParentSpanID: h.tp.spanID, SpanID: newSpanID(), TurnID: h.turn, Link: h.link, Usage: usage}
	rec.DurationMS = float64(end.Sub(h.start)) / float64(time.Millisecond)
	if st.State != tracked.StateRunning {
		code := st.ExitCode
		rec.ExitCode = &code
		if code != 0 || st.Signal != "" {
			rec.Status, rec.Error = "error", st.Reason
		}
	}
	if err := h.m.ingest(h.k, SourceDaemon, []Record{rec}); err != nil {
		return nil, err
	}
	return h.meta(usage), nil
}

func runName(argv []string) string {
	if len(argv) == 0 {
		return "run"
	}
	return argv[0]
}

func newSpanID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
