package monitor

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/allox-os/allox/internal/rpc"
	"github.com/allox-os/allox/services/internal/plugin"
)

// The plugin's actions; all are served on the control listeners and on the session socket (where
// they are about the caller's session).
const (
	ActionSpan    = "monitor.span"
	ActionEvent   = "monitor.event"
	ActionMetric  = "monitor.metric"
	ActionRecords = "monitor.records"
	ActionSummary = "monitor.summary"
	ActionReport  = "monitor.report"
)

const both = plugin.ScopeControl | plugin.ScopeSession

func (m *Monitor) actions() map[string]plugin.Action {
	return map[string]plugin.Action{
		ActionSpan:    {Handler: m.span, Scope: both},
		ActionEvent:   {Handler: m.event, Scope: both},
		ActionMetric:  {Handler: m.metric, Scope: both},
		ActionRecords: {Handler: m.records, Scope: both, ReadOnly: true},
		ActionSummary: {Handler: m.summary, Scope: both, ReadOnly: true},
		ActionReport:  {Handler: m.report, Scope: both, ReadOnly: true},
	}
}

type sessionParams struct {
	AgentID   string `json:"agent_id"`
	SessionID string `json:"session_id"`
}

// spanParams are monitor.span's: a finished span as a framework without OpenTelemetry reports it.
type spanParams struct {
	sessionParams
	Name string `json:"name"`
	// Category: "tool", "model", "agent" or "span" (default: from the gen_ai.* attributes).
	Category     string         `json:"category"`
	Start        time.Time      `json:"start"`
	End          time.Time      `json:"end"`
	DurationMS   float64        `json:"duration_ms"`
	Status       string         `json:"status"`
	Error        string         `json:"error"`
	TurnID       string         `json:"turn_id"`
	TraceID      string         `json:"trace_id"`
	SpanID       string         `json:"span_id"`
	ParentSpanID string         `json:"parent_span_id"`
	Attributes   map[string]any `json:"attributes"`
}

func (m *Monitor) span(_ context.Context, c *plugin.Call) (any, error) {
	var p spanParams
	if err := rpc.DecodeParams(c.Params, &p); err != nil {
		return nil, err
	}
	if p.Name == "" {
		return nil, rpc.Errorf(rpc.CodeInvalidParams, "params.name", "params.name is required: what the span did, e.g. \"read_file\"")
	}
	switch p.Category {
	case "", CategoryModel, CategoryTool, CategoryAgent, CategoryOther:
	default:
		return nil, &rpc.Error{Code: rpc.CodeInvalidParams, Field: "params.category", Choices: []string{CategoryModel, CategoryTool, CategoryAgent, CategoryOther},
			Message: fmt.Sprintf("params.category %q: use tool, model, agent or span (or leave it out to go by the gen_ai.* attributes)", p.Category)}
	}
	switch p.Status {
	case "", "ok", "error":
	default:
		return nil, rpc.Errorf(rpc.CodeInvalidParams, "params.status", "params.status %q: use \"ok\" or \"error\" (or leave it out)", p.Status)
	}
	if err := checkIDs(p.TraceID, p.SpanID, p.ParentSpanID); err != nil {
		return nil, err
	}
	now := time.Now().UTC()
	switch {
	case p.DurationMS < 0:
		return nil, rpc.Errorf(rpc.CodeInvalidParams, "params.duration_ms", "params.duration_ms %v is negative", p.DurationMS)
	case !p.Start.IsZero() && !p.End.IsZero() && p.End.Before(p.Start):
		return nil, rpc.Errorf(rpc.CodeInvalidParams, "params.end", "params.end %s is before params.start %s", p.End, p.Start)
	}
	if p.End.IsZero() {
		p.End = now
	}
	if p.Start.IsZero() {
		p.Start = p.End.Add(-time.Duration(p.DurationMS * float64(time.Millisecond)))
	}
	r := Record{Kind: KindSpan, Name: p.Name, Category: p.Category, Start: p.Start.UTC(), End: p.End.UTC(), Status: p.Status, Error: p.Error,
		TurnID: p.TurnID, TraceID: p.TraceID, SpanID: p.SpanID, ParentSpanID: p.ParentSpanID, Attrs: numbersToInt(p.Attributes)}
	r.DurationMS = float64(r.End.Sub(r.Start)) / float64(time.Millisecond)
	if r.Category == "" {
		r.Category = category(r.Attrs)
	}
	genAI(&r)
	if r.Error != "" && r.Status == "" {
		r.Status = "error"
	}
	return m.keep(p.sessionParams, r)
}

func (m *Monitor) event(_ context.Context, c *plugin.Call) (any, error) {
	var p struct {
		sessionParams
		Name       string         `json:"name"`
		Time       time.Time      `json:"time"`
		TurnID     string         `json:"turn_id"`
		Attributes map[string]any `json:"attributes"`
	}
	if err := rpc.DecodeParams(c.Params, &p); err != nil {
		return nil, err
	}
	if p.Name == "" {
		return nil, rpc.Errorf(rpc.CodeInvalidParams, "params.name", "params.name is required: the event's name, e.g. \"gen_ai.user.message\"")
	}
	if p.Time.IsZero() {
		p.Time = time.Now().UTC()
	}
	r := Record{Kind: KindEvent, Name: p.Name, Start: p.Time.UTC(), TurnID: p.TurnID, Attrs: numbersToInt(p.Attributes)}
	genAI(&r)
	return m.keep(p.sessionParams, r)
}

func (m *Monitor) metric(_ context.Context, c *plugin.Call) (any, error) {
	var p struct {
		sessionParams
		Name       string         `json:"name"`
		Value      *float64       `json:"value"`
		Unit       string         `json:"unit"`
		Time       time.Time      `json:"time"`
		TurnID     string         `json:"turn_id"`
		Attributes map[string]any `json:"attributes"`
	}
	if err := rpc.DecodeParams(c.Params, &p); err != nil {
		return nil, err
	}
	switch {
	case p.Name == "":
		return nil, rpc.Errorf(rpc.CodeInvalidParams, "params.name", "params.name is required: the metric's name, e.g. \"gen_ai.client.token.usage\"")
	case p.Value == nil:
		return nil, rpc.Errorf(rpc.CodeInvalidParams, "params.value", "params.value is required: the data point's number")
	}
	if p.Time.IsZero() {
		p.Time = time.Now().UTC()
	}
	r := Record{Kind: KindMetric, Name: p.Name, Value: p.Value, Unit: p.Unit, Start: p.Time.UTC(), End: p.Time.UTC(), TurnID: p.TurnID, Attrs: numbersToInt(p.Attributes)}
	genAI(&r)
	return m.keep(p.sessionParams, r)
}

// keep ingests one record from the API for a session that exists.
func (m *Monitor) keep(s sessionParams, r Record) (any, error) {
	if _, err := m.turns.Turns(s.AgentID, s.SessionID); err != nil {
		return nil, err
	}
	recs := []Record{r}
	if err := m.ingest(key{s.AgentID, s.SessionID}, SourceAPI, recs); err != nil {
		return nil, err
	}
	return map[string]any{"recorded": 1, "turn_id": recs[0].TurnID}, nil
}

func (m *Monitor) records(_ context.Context, c *plugin.Call) (any, error) {
	var p struct {
		sessionParams
		Kind string `json:"kind"`
	}
	if err := rpc.DecodeParams(c.Params, &p); err != nil {
		return nil, err
	}
	switch p.Kind {
	case "", KindSpan, KindEvent, KindMetric, KindRun:
	default:
		return nil, &rpc.Error{Code: rpc.CodeInvalidParams, Field: "params.kind", Choices: []string{KindSpan, KindEvent, KindMetric, KindRun},
			Message: fmt.Sprintf("params.kind %q: use span, event, metric or run (or leave it out for all)", p.Kind)}
	}
	recs, err := m.sessionRecords(p.sessionParams)
	if err != nil {
		return nil, err
	}
	out := []Record{}
	for _, r := range recs {
		if p.Kind == "" || r.Kind == p.Kind {
			out = append(out, r)
		}
	}
	return map[string]any{"records": out}, nil
}

// sessionRecords reads a session's journal; the session must exist, or have a journal left.
func (m *Monitor) sessionRecords(s sessionParams) ([]Record, error) {
	recs, err := m.journal.read(s.AgentID, s.SessionID)
	if err != nil {
		return nil, err
	}
	if len(recs) == 0 {
		if _, err := m.turns.Turns(s.AgentID, s.SessionID); err != nil {
			return nil, err
		}
	}
	return recs, nil
}

// checkIDs checks OTLP-style hex ids: a 32-digit trace id, 16-digit span ids.
func checkIDs(trace, span, parent string) error {
	for _, id := range []struct {
		field, v string
		n        int
	}{{"params.trace_id", trace, 32}, {"params.span_id", span, 16}, {"params.parent_span_id", parent, 16}} {
		if id.v == "" {
			continue
		}
		if len(id.v) != id.n || strings.Trim(id.v, "0123456789abcdef") != "" {
			return rpc.Errorf(rpc.CodeInvalidParams, id.field, "%s %q: use %d lower-case hex digits, as OpenTelemetry writes it", id.field, id.v, id.n)
		}
	}
	return nil
}

// numbersToInt makes whole JSON numbers int64, as OTLP's int attributes are (tokens).
func numbersToInt(m map[string]any) map[string]any {
	for k, v := range m {
		if f, ok := v.(float64); ok && f == float64(int64(f)) {
			m[k] = int64(f)
		}
	}
	return m
}
