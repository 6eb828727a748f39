// Command otelagent is the monitor tests' agent: it runs inside a sandboxed run and reports with
// the OpenTelemetry Go SDK configured only by the environment the monitor plugin gives the run
// (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_PROTOCOL).
//
//	otelagent turn                             one turn: an agent span, a model call and two tool
//	                                           calls; for each it prints "tool NAME TRACEPARENT"
//	                                           and waits for $HOME/NAME.done while the harness
//	                                           outside starts the tool's run by process.start
//	                                           (runs cannot reach the control listener)
//	otelagent busy MS                          spin for MS milliseconds of CPU
//	otelagent alloc MIB                        allocate and touch MIB MiB, hold it briefly
//	otelagent post ENDPOINT                    export one span to ENDPOINT (an attack on another
//	                                           session's receiver); fail if it does not go through
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "otelagent:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 1 && args[0] == "turn" {
		return turn()
	}
	if len(args) < 2 {
		return fmt.Errorf("usage: otelagent turn | busy MS | alloc MIB | post ENDPOINT")
	}
	switch args[0] {
	case "busy":
		ms, _ := strconv.Atoi(args[1])
		busy(time.Duration(ms) * time.Millisecond)
		return nil
	case "alloc":
		mib, _ := strconv.Atoi(args[1])
		b := make([]byte, mib<<20)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		time.Sleep(100 * time.Millisecond)
		fmt.Println(len(b))
		return nil
	case "post":
		return post(args[1])
	}
	return fmt.Errorf("unknown mode %q", args[0])
}

func busy(d time.Duration) {
	end := time.Now().Add(d)
	x := 0
	for time.Now().Before(end) {
		for i := 0; i < 100000; i++ {
			x += i
		}
	}
	fmt.Println(x > 0)
}

func provider(ctx context.Context) (*sdktrace.TracerProvider, error) {
	exp, err := otlptracehttp.New(ctx) // endpoint and protocol from the environment only
	if err != nil {
		return nil, err
	}
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp),
		sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", "otelagent")))), nil
}

func turn() error {
	ctx := context.Background()
	tp, err := provider(ctx)
	if err != nil {
		return err
	}
	tr := tp.Tracer("otelagent")
	ctx, root := tr.Start(ctx, "invoke_agent otelagent", trace.WithAttributes(attribute.String("gen_ai.operation.name", "invoke_agent")))
	_, chat := tr.Start(ctx, "chat test-model", trace.WithAttributes(attribute.String("gen_ai.operation.name", "chat"),
		attribute.String("gen_ai.request.model", "test-model"), attribute.Int64("gen_ai.usage.input_tokens", 123), attribute.Int64("gen_ai.usage.output_tokens", 45)))
	time.Sleep(20 * time.Millisecond)
	chat.End()
	for _, tool := range []string{"busy", "alloc"} {
		tctx, span := tr.Start(ctx, "execute_tool "+tool, trace.WithAttributes(attribute.String("gen_ai.operation.name", "execute_tool"),
			attribute.String("gen_ai.tool.name", tool)))
		sc := trace.SpanContextFromContext(tctx)
		// The harness outside starts the tool's run (process.start) under this traceparent and
		// says so with a file in the session's workspace.
		fmt.Printf("tool %s 00-%s-%s-01\n", tool, sc.TraceID(), sc.SpanID())
		done := filepath.Join(os.Getenv("HOME"), tool+".done")
		for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(20 * time.Millisecond) {
			if _, err := os.Stat(done); err == nil {
				break
			}
			if time.Now().After(deadline) {
				span.End()
				return fmt.Errorf("tool %s: no %s in 2 minutes", tool, done)
			}
		}
		span.End()
	}
	root.End()
	return tp.Shutdown(ctx)
}

// post exports one span to endpoint; an error if the export does not go through.
func post(endpoint string) error {
	ctx := context.Background()
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(endpoint+"/v1/traces"), otlptracehttp.WithRetry(otlptracehttp.RetryConfig{Enabled: false}),
		otlptracehttp.WithTimeout(3*time.Second))
	if err != nil {
		return err
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}, TraceFlags: trace.FlagsSampled})
	stub := tracetest.SpanStub{Name: "injected", SpanContext: sc, StartTime: time.Now(), EndTime: time.Now()}
	return exp.ExportSpans(ctx, []sdktrace.ReadOnlySpan{stub.Snapshot()})
}
