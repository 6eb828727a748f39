package monitor

import (
	"encoding/hex"
	"time"

	collogs "go.opentelemetry.io/proto/otlp/collector/logs/v1"
	colmetrics "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	common "go.opentelemetry.io/proto/otlp/common/v1"
	metrics "go.opentelemetry.io/proto/otlp/metrics/v1"
	resource "go.opentelemetry.io/proto/otlp/resource/v1"
	trace "go.opentelemetry.io/proto/otlp/trace/v1"
)

// The attribute a sender may set to name its turn (else the turn open at the span's start).
const attrTurn = "allox.turn_id"

// GenAI semantic convention attributes the monitor reads.
const (
	attrOperation    = "gen_ai.operation.name"
	attrRequestModel = "gen_ai.request.model"
	attrRespModel    = "gen_ai.response.model"
	attrInputTokens  = "gen_ai.usage.input_tokens"
	attrOutputTokens = "gen_ai.usage.output_tokens"
	attrToolName     = "gen_ai.tool.name"
	attrErrorType    = "error.type"
)

// category sorts a span by the GenAI conventions' operation name, else by the attributes that
// only a tool or a model call has.
func category(attrs map[string]any) string {
	switch op, _ := attrs[attrOperation].(string); op {
	case "chat", "text_completion", "generate_content", "embeddings":
		return CategoryModel
	case "execute_tool":
		return CategoryTool
	case "create_agent", "invoke_agent":
		return CategoryAgent
	}
	switch {
	case attrs[attrToolName] != nil:
		return CategoryTool
	case attrs[attrRequestModel] != nil:
		return CategoryModel
	}
	return CategoryOther
}

// genAI fills the record's model, tokens, tool and error from its attributes.
func genAI(r *Record) {
	a := r.Attrs
	r.Model, _ = a[attrRespModel].(string)
	if r.Model == "" {
		r.Model, _ = a[attrRequestModel].(string)
	}
	r.InputTokens, _ = a[attrInputTokens].(int64)
	r.OutputTokens, _ = a[attrOutputTokens].(int64)
	r.Tool, _ = a[attrToolName].(string)
	if e, ok := a[attrErrorType].(string); ok && r.Error == "" {
		r.Error = e
	}
}

func attrMap(kvs []*common.KeyValue) map[string]any {
	if len(kvs) == 0 {
		return nil
	}
	m := make(map[string]any, len(kvs))
	for _, kv := range kvs {
		m[kv.GetKey()] = anyValue(kv.GetValue())
	}
	return m
}

func anyValue(v *common.AnyValue) any {
	switch x := v.GetValue().(type) {
	case *common.AnyValue_StringValue:
		return x.StringValue
	case *common.AnyValue_BoolValue:
		return x.BoolValue
	case *common.AnyValue_IntValue:
		return x.IntValue
	case *common.AnyValue_DoubleValue:
		return x.DoubleValue
	case *common.AnyValue_BytesValue:
		return hex.EncodeToString(x.BytesValue)
	case *common.AnyValue_ArrayValue:
		out := make([]any, 0, len(x.ArrayValue.GetValues()))
		for _, e := range x.ArrayValue.GetValues() {
			out = append(out, anyValue(e))
		}
		return out
	case *common.AnyValue_KvlistValue:
		return attrMap(x.KvlistValue.GetValues())
	}
	return nil
}

func serviceName(r *resource.Resource) string {
	for _, kv := range r.GetAttributes() {
		if kv.GetKey() == "service.name" {
			return kv.GetValue().GetStringValue()
		}
	}
	return ""
}

func unixNano(n uint64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, int64(n)).UTC()
}

func hexID(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return hex.EncodeToString(b)
}

// countSpans is how many spans a request carries (for the batch bound).
func countSpans(req *coltrace.ExportTraceServiceRequest) int {
	n := 0
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			n += len(ss.GetSpans())
		}
	}
	return n
}

// fromTraces turns an OTLP trace export into span records and their events.
func fromTraces(req *coltrace.ExportTraceServiceRequest) []Record {
	var out []Record
	for _, rs := range req.GetResourceSpans() {
		svc := serviceName(rs.GetResource())
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				r := Record{Kind: KindSpan, Source: SourceOTLP, TraceID: hexID(s.GetTraceId()), SpanID: hexID(s.GetSpanId()),
					ParentSpanID: hexID(s.GetParentSpanId()), Name: s.GetName(), Service: svc,
					Start: unixNano(s.GetStartTimeUnixNano()), End: unixNano(s.GetEndTimeUnixNano()), Attrs: attrMap(s.GetAttributes())}
				if !r.Start.IsZero() && r.End.After(r.Start) {
					r.DurationMS = float64(r.End.Sub(r.Start)) / float64(time.Millisecond)
				}
				switch s.GetStatus().GetCode() {
				case trace.Status_STATUS_CODE_OK:
					r.Status = "ok"
				case trace.Status_STATUS_CODE_ERROR:
					r.Status, r.Error = "error", s.GetStatus().GetMessage()
				}
				r.Category = category(r.Attrs)
				genAI(&r)
				if r.Error != "" && r.Status == "" {
					r.Status = "error"
				}
				out = append(out, r)
				for _, e := range s.GetEvents() {
					out = append(out, Record{Kind: KindEvent, Source: SourceOTLP, TraceID: r.TraceID, SpanID: r.SpanID, Name: e.GetName(),
						Service: svc, Start: unixNano(e.GetTimeUnixNano()), Attrs: attrMap(e.GetAttributes())})
				}
			}
		}
	}
	return out
}

// fromMetrics turns an OTLP metrics export into one record per data point.
func fromMetrics(req *colmetrics.ExportMetricsServiceRequest) []Record {
	var out []Record
	for _, rm := range req.GetResourceMetrics() {
		svc := serviceName(rm.GetResource())
		for _, sm := range rm.GetScopeMetrics() {
			for _, m := range sm.GetMetrics() {
				base := Record{Kind: KindMetric, Source: SourceOTLP, Name: m.GetName(), Unit: m.GetUnit(), Service: svc}
				add := func(attrs []*common.KeyValue, start, end uint64, value float64, count uint64) {
					r := base
					r.Attrs, r.Start, r.End, r.Count = attrMap(attrs), unixNano(start), unixNano(end), count
					r.Value = &value
					genAI(&r)
					out = append(out, r)
				}
				number := func(points []*metrics.NumberDataPoint) {
					for _, p := range points {
						v := p.GetAsDouble()
						if _, ok := p.GetValue().(*metrics.NumberDataPoint_AsInt); ok {
							v = float64(p.GetAsInt())
						}
						add(p.GetAttributes(), p.GetStartTimeUnixNano(), p.GetTimeUnixNano(), v, 0)
					}
				}
				number(m.GetGauge().GetDataPoints())
				number(m.GetSum().GetDataPoints())
				for _, p := range m.GetHistogram().GetDataPoints() {
					add(p.GetAttributes(), p.GetStartTimeUnixNano(), p.GetTimeUnixNano(), p.GetSum(), p.GetCount())
				}
				for _, p := range m.GetExponentialHistogram().GetDataPoints() {
					add(p.GetAttributes(), p.GetStartTimeUnixNano(), p.GetTimeUnixNano(), p.GetSum(), p.GetCount())
				}
				for _, p := range m.GetSummary().GetDataPoints() {
					add(p.GetAttributes(), p.GetStartTimeUnixNano(), p.GetTimeUnixNano(), p.GetSum(), p.GetCount())
				}
			}
		}
	}
	return out
}

// fromLogs turns an OTLP logs export into event records.
func fromLogs(req *collogs.ExportLogsServiceRequest) []Record {
	var out []Record
	for _, rl := range req.GetResourceLogs() {
		svc := serviceName(rl.GetResource())
		for _, sl := range rl.GetScopeLogs() {
			for _, l := range sl.GetLogRecords() {
				r := Record{Kind: KindEvent, Source: SourceOTLP, Name: l.GetEventName(), Service: svc, TraceID: hexID(l.GetTraceId()),
					SpanID: hexID(l.GetSpanId()), Start: unixNano(l.GetTimeUnixNano()), Attrs: attrMap(l.GetAttributes())}
				if r.Start.IsZero() {
					r.Start = unixNano(l.GetObservedTimeUnixNano())
				}
				if r.Name == "" {
					r.Name, _ = r.Attrs["event.name"].(string)
				}
				if b := l.GetBody(); b != nil {
					if r.Attrs == nil {
						r.Attrs = map[string]any{}
					}
					r.Attrs["body"] = anyValue(b)
				}
				genAI(&r)
				out = append(out, r)
			}
		}
	}
	return out
}
