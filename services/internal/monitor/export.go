package monitor

import (
	"context"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// Export batching: at most exportBatch records per request, at least every exportEvery, and a
// queue of exportQueue records beyond which new ones are dropped (and counted), so that a slow or
// absent collector never blocks a receiver or a run.
const (
	exportBatch = 512
	exportEvery = 2 * time.Second
	exportQueue = 16384
)

// otlpExporter sends span and run records upstream as OTLP spans with the OpenTelemetry Go SDK's
// OTLP/HTTP exporter, from one goroutine of its own, and forwards metric and log exports as the
// receiver took them.
type otlpExporter struct {
	*forwarder // metrics and logs
	exp        *otlptrace.Exporter
	queue      chan Record
	dropped    atomic.Int64
	log        *slog.Logger
	done       chan struct{}
	once       sync.Once
}

// NewExporter exports to the OTLP/HTTP endpoint (e.g. http://collector:4318).
func NewExporter(ctx context.Context, endpoint string, log *slog.Logger) (Exporter, error) {
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("--monitor-export %q: name an OTLP/HTTP endpoint, e.g. http://collector:4318", endpoint)
	}
	opts := []otlptracehttp.Option{otlptracehttp.WithEndpointURL(u.JoinPath("v1/traces").String())}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("--monitor-export %s: %w", endpoint, err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	e := &otlpExporter{forwarder: newForwarder(strings.TrimSuffix(u.String(), "/")), exp: exp, queue: make(chan Record, exportQueue), log: log, done: make(chan struct{})}
	go e.loop()
	return e, nil
}

// Export queues the span and run records; it never blocks.
func (e *otlpExporter) Export(recs []Record) {
	for _, r := range recs {
		if r.Kind != KindSpan && r.Kind != KindRun {
			continue
		}
		select {
		case e.queue <- r:
		default:
			e.dropped.Add(1)
		}
	}
}

func (e *otlpExporter) loop() {
	defer close(e.done)
	tick := time.NewTicker(exportEvery)
	defer tick.Stop()
	var batch []Record
	flush := func() {
		if len(batch) == 0 {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := e.exp.ExportSpans(ctx, snapshots(batch)); err != nil {
			e.log.Warn("monitor: export upstream failed; the batch is dropped", "records", len(batch), "error", err.Error())
		}
		cancel()
		batch = batch[:0]
	}
	for {
		select {
		case r, ok := <-e.queue:
			if !ok {
				flush()
				return
			}
			if batch = append(batch, r); len(batch) >= exportBatch {
				flush()
			}
		case <-tick.C:
			flush()
		}
	}
}

// Shutdown sends what is queued and stops.
func (e *otlpExporter) Shutdown(ctx context.Context) error {
	e.once.Do(func() { close(e.queue) })
	select {
	case <-e.done:
	case <-ctx.Done():
	}
	e.forwarder.shutdown(ctx)
	if n := e.dropped.Load(); n > 0 {
		e.log.Warn("monitor: records dropped from the upstream export (queue full)", "records", n)
	}
	if n := e.forwarder.dropped.Load(); n > 0 {
		e.log.Warn("monitor: metric and log exports dropped upstream (queue full or refused)", "exports", n)
	}
	return e.exp.Shutdown(ctx)
}

// snapshots turns records into the SDK's read-only spans: the session, turn, run and resource
// use as allox.* attributes, the sender's service as the resource.
func snapshots(recs []Record) []sdktrace.ReadOnlySpan {
	out := make([]sdktrace.ReadOnlySpan, 0, len(recs))
	for _, r := range recs {
		var tid trace.TraceID
		var sid, pid trace.SpanID
		_, _ = hex.Decode(tid[:], []byte(r.TraceID))
		_, _ = hex.Decode(sid[:], []byte(r.SpanID))
		_, _ = hex.Decode(pid[:], []byte(r.ParentSpanID))
		attrs := []attribute.KeyValue{attribute.String("allox.agent_id", r.AgentID), attribute.String("allox.session_id", r.SessionID),
			attribute.String("allox.kind", r.Kind), attribute.String("allox.source", r.Source)}
		if r.TurnID != "" {
			attrs = append(attrs, attribute.String(attrTurn, r.TurnID))
		}
		if r.RunID != "" {
			attrs = append(attrs, attribute.String("allox.run_id", r.RunID), attribute.StringSlice("process.command_args", r.Argv))
		}
		if u := r.Usage; u != nil {
			attrs = append(attrs, attribute.Int64("allox.run.cpu_usec", int64(u.CPUUsec)), attribute.Int64("allox.run.memory_peak_bytes", int64(u.MemoryPeak)),
				attribute.Int64("allox.run.io_read_bytes", int64(u.IORead)), attribute.Int64("allox.run.io_write_bytes", int64(u.IOWrite)),
				attribute.Int64("allox.run.pids_peak", int64(u.PidsPeak)))
		}
		for _, k := range sortedKeys(r.Attrs) {
			attrs = append(attrs, attrOf(k, r.Attrs[k]))
		}
		st := sdktrace.Status{Code: codes.Unset}
		switch r.Status {
		case "ok":
			st.Code = codes.Ok
		case "error":
			st = sdktrace.Status{Code: codes.Error, Description: r.Error}
		}
		svc := r.Service
		if svc == "" {
			svc = "allox-workspace-daemon"
		}
		stub := tracetest.SpanStub{Name: r.Name, StartTime: r.Start, EndTime: r.End, Attributes: attrs, Status: st,
			SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled}),
			Resource:    resource.NewSchemaless(attribute.String("service.name", svc))}
		if pid.IsValid() {
			stub.Parent = trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: pid, TraceFlags: trace.FlagsSampled})
		}
		out = append(out, stub.Snapshot())
	}
	return out
}

func attrOf(k string, v any) attribute.KeyValue {
	switch x := v.(type) {
	case string:
		return attribute.String(k, x)
	case bool:
		return attribute.Bool(k, x)
	case int64:
		return attribute.Int64(k, x)
	case float64:
		return attribute.Float64(k, x)
	}
	return attribute.String(k, fmt.Sprint(v))
}
