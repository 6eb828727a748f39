package monitor

import (
	"bytes"
	"github.com/allox-os/allox/internal/testenv"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/allox-os/allox/services/internal/workspace"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	common "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// noTurns is a session with an empty turn history (the benchmark is about the receiver).
type noTurns struct{}

func (noTurns) Turns(string, string) ([]workspace.Turn, error) { return nil, nil }

// batch is an OTLP trace export of n spans like a GenAI agent's: a tool call's attributes each.
func batch(tb testing.TB, n int) []byte {
	ss := &tracepb.ScopeSpans{}
	for i := 0; i < n; i++ {
		ss.Spans = append(ss.Spans, &tracepb.Span{TraceId: bytes.Repeat([]byte{7}, 16), SpanId: []byte{0, 0, 0, 0, byte(i >> 16), byte(i >> 8), byte(i), 1},
			Name: "execute_tool read_file", StartTimeUnixNano: uint64(time.Now().UnixNano()), EndTimeUnixNano: uint64(time.Now().UnixNano()) + 1e6,
			Attributes: []*common.KeyValue{
				{Key: "gen_ai.operation.name", Value: &common.AnyValue{Value: &common.AnyValue_StringValue{StringValue: "execute_tool"}}},
				{Key: "gen_ai.tool.name", Value: &common.AnyValue{Value: &common.AnyValue_StringValue{StringValue: "read_file"}}},
				{Key: "file.size", Value: &common.AnyValue{Value: &common.AnyValue_IntValue{IntValue: int64(i)}}},
			}})
	}
	b, err := proto.Marshal(&coltrace.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{{ScopeSpans: []*tracepb.ScopeSpans{ss}}}})
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// BenchmarkOTLPIngest posts 512-span protobuf batches to a session's real receiver (decoded,
// associated, journalled to disk) and, in the same run, to a loopback HTTP server that only reads
// the body: the baseline is the transport. It reports spans/s, the p50 and p99 batch latency and
// the ratio to the baseline. Target: at least 20,000 spans/s on a 2-core machine.
func BenchmarkOTLPIngest(b *testing.B) {
	const spans = 512
	m, err := Open(Config{Root: b.TempDir()}, noTurns{}, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	port, err := m.port(key{"a", "s"})
	if err != nil {
		b.Fatal(err)
	}
	if err := m.enterNS(key{"a", "s"}, os.Getpid(), ownCgroup(b)); err != nil { // as a run in the daemon's namespace
		b.Fatal(err)
	}
	base := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.Copy(io.Discard, r.Body) }))
	defer base.Close()
	body := batch(b, spans)
	post := func(url string) time.Duration {
		start := time.Now()
		resp, err := http.Post(url, ctProtobuf, bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("export: %s", resp.Status)
		}
		return time.Since(start)
	}
	recv := "http://127.0.0.1:" + strconv.Itoa(port) + "/v1/traces"
	var ours, transport []time.Duration
	for b.Loop() {
		ours = append(ours, post(recv))
		transport = append(transport, post(base.URL))
	}
	var total time.Duration
	for _, d := range ours {
		total += d
	}
	b.ReportMetric(float64(spans*len(ours))/total.Seconds(), "spans/s")
	b.ReportMetric(ms(testenv.Percentile(ours, 50)), "batch-p50-ms")
	b.ReportMetric(ms(testenv.Percentile(ours, 99)), "batch-p99-ms")
	b.ReportMetric(ms(testenv.Percentile(transport, 50)), "transport-p50-ms")
	b.ReportMetric(float64(testenv.Percentile(ours, 50))/float64(testenv.Percentile(transport, 50)), "ratio")
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
