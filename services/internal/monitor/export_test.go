package monitor

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	colmetrics "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	"google.golang.org/protobuf/proto"
)

// collector is an OTLP/HTTP trace endpoint that keeps what it gets, decoded.
type collector struct {
	mu      sync.Mutex
	spans   map[string]map[string]string // span name → string attributes
	metrics map[string]map[string]string // metric name → its resource's string attributes
	block   chan struct{}                // when set, every request waits on it
}

func (c *collector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if c.block != nil {
		<-c.block
	}
	body, _ := io.ReadAll(r.Body)
	if r.URL.Path == "/v1/metrics" {
		var req colmetrics.ExportMetricsServiceRequest
		if err := proto.Unmarshal(body, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, rm := range req.GetResourceMetrics() {
			attrs := map[string]string{}
			for _, kv := range rm.GetResource().GetAttributes() {
				attrs[kv.GetKey()] = kv.GetValue().GetStringValue()
			}
			for _, sm := range rm.GetScopeMetrics() {
				for _, m := range sm.GetMetrics() {
					c.metrics[m.GetName()] = attrs
				}
			}
		}
		return
	}
	var req coltrace.ExportTraceServiceRequest
	if err := proto.Unmarshal(body, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				attrs := map[string]string{"service.name": serviceName(rs.GetResource()), "parent": hexID(s.GetParentSpanId())}
				for _, kv := range s.GetAttributes() {
					attrs[kv.GetKey()] = kv.GetValue().GetStringValue()
				}
				c.spans[s.GetName()] = attrs
			}
		}
	}
	w.Header().Set("Content-Type", ctProtobuf)
	b, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
	_, _ = w.Write(b)
}

// What the monitor receives and derives goes upstream through the OTel SDK's exporter, with the
// session, turn and run as allox.* attributes and the sender's service kept.
func TestExportUpstream(t *testing.T) {
	c := &collector{spans: map[string]map[string]string{}}
	srv := httptest.NewServer(c)
	defer srv.Close()
	exp, err := NewExporter(context.Background(), srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	m, err := Open(Config{Root: t.TempDir(), Export: exp}, noTurns{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	recs := []Record{
		{Kind: KindSpan, Name: "execute_tool grep", TraceID: "0102030405060708090a0b0c0d0e0f10", SpanID: "0102030405060708", Service: "agent", TurnID: "3", Start: now, End: now},
		{Kind: KindRun, Name: "grep", RunID: "r1", TraceID: "0102030405060708090a0b0c0d0e0f10", SpanID: "1112131415161718", ParentSpanID: "0102030405060708", Start: now, End: now},
		{Kind: KindMetric, Name: "not a span"},
	}
	if err := m.ingest(key{"a", "s"}, SourceOTLP, recs); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil { // flushes the export
		t.Fatal(err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	tool, run := c.spans["execute_tool grep"], c.spans["grep"]
	switch {
	case len(c.spans) != 2:
		t.Errorf("exported %d spans (%v), want the span and the run", len(c.spans), c.spans)
	case tool["allox.session_id"] != "s" || tool["allox.agent_id"] != "a" || tool[attrTurn] != "3" || tool["service.name"] != "agent":
		t.Errorf("the tool span upstream: %v", tool)
	case run["allox.run_id"] != "r1" || run["parent"] != "0102030405060708" || run["allox.kind"] != KindRun:
		t.Errorf("the run upstream: %v", run)
	}
}

// A collector that does not answer never blocks ingest: the queue fills and the rest is dropped.
func TestExportNeverBlocks(t *testing.T) {
	c := &collector{spans: map[string]map[string]string{}, block: make(chan struct{})}
	srv := httptest.NewServer(c)
	defer srv.Close()
	defer close(c.block)
	e, err := NewExporter(context.Background(), srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	recs := make([]Record, exportQueue)
	for i := range recs {
		recs[i] = Record{Kind: KindSpan, Name: "s"}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 4; i++ { // four times what the queue holds, with nobody taking any out
			e.Export(recs)
		}
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Export blocked on a collector that does not answer")
	}
	if n := e.(*otlpExporter).dropped.Load(); n == 0 {
		t.Error("nothing dropped with the queue full: Export must have waited")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = e.Shutdown(ctx)
}

// A metrics export a session's receiver takes goes upstream as it came, with the session on its
// resource.
func TestForwardMetricsUpstream(t *testing.T) {
	c := &collector{spans: map[string]map[string]string{}, metrics: map[string]map[string]string{}}
	srv := httptest.NewServer(c)
	defer srv.Close()
	exp, err := NewExporter(context.Background(), srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	m, err := Open(Config{Root: t.TempDir(), Export: exp}, noTurns{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	k := key{"a", "s"}
	port, err := m.port(k)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.enterNS(k, os.Getpid(), ownCgroup(t)); err != nil {
		t.Fatal(err)
	}
	v := 1.0
	body, _ := proto.Marshal(&colmetrics.ExportMetricsServiceRequest{ResourceMetrics: []*metricspb.ResourceMetrics{{ScopeMetrics: []*metricspb.ScopeMetrics{{
		Metrics: []*metricspb.Metric{{Name: "queue", Data: &metricspb.Metric_Gauge{Gauge: &metricspb.Gauge{DataPoints: []*metricspb.NumberDataPoint{
			{Value: &metricspb.NumberDataPoint_AsDouble{AsDouble: v}}}}}}}}}}}})
	resp, err := http.Post("http://127.0.0.1:"+strconv.Itoa(port)+"/v1/metrics", ctProtobuf, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if got := c.metrics["queue"]; got["allox.session_id"] != "s" || got["allox.agent_id"] != "a" {
		t.Errorf("the metric upstream: resource %v (all: %v)", got, c.metrics)
	}
}

// Attack: a process outside the session's cgroup tree posts to the session's receiver in the
// daemon's namespace (as another network-disabled session's run could): 403, nothing stored.
func TestReceiverRefusesOtherProcesses(t *testing.T) {
	m, err := Open(Config{Root: t.TempDir()}, noTurns{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	k := key{"a", "s"}
	port, err := m.port(k)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.enterNS(k, os.Getpid(), t.TempDir()); err != nil { // a session tree without this process
		t.Fatal(err)
	}
	body, _ := proto.Marshal(&colmetrics.ExportMetricsServiceRequest{})
	resp, err := http.Post("http://127.0.0.1:"+strconv.Itoa(port)+"/v1/metrics", ctProtobuf, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	msg, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(msg), "another session's") {
		t.Fatalf("a post from outside the session: %s %q, want 403 saying whose receiver it is", resp.Status, msg)
	}
	recs, err := m.journal.read(k.agent, k.session)
	if err != nil || len(recs) != 0 {
		t.Fatalf("the refused post stored %d records (%v)", len(recs), err)
	}
}
