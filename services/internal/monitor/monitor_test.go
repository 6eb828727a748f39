package monitor

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/allox-os/allox/internal/cgroup"
	"github.com/allox-os/allox/services/internal/workspace"
	"github.com/google/go-cmp/cmp"
	collogs "go.opentelemetry.io/proto/otlp/collector/logs/v1"
	colmetrics "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	common "go.opentelemetry.io/proto/otlp/common/v1"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
)

func TestParseTraceParent(t *testing.T) {
	for _, tc := range []struct {
		in, trace, span string
	}{
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7", "", ""},    // no flags
		{"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", "", ""}, // upper case
		{"00-00000000000000000000000000000000-00f067aa0ba902b7-01", "", ""}, // zero trace id
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", "", ""}, // zero span id
		{"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "", ""}, // version ff
		{"00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01", "", ""}, // not hex
		{"00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01", "", ""}, // separators
		{"", "", ""},
	} {
		tp, err := parseTraceParent(tc.in)
		switch {
		case tc.trace == "" && err == nil:
			t.Errorf("parseTraceParent(%q) = %+v, want an error", tc.in, tp)
		case tc.trace != "" && (err != nil || tp.traceID != tc.trace || tp.spanID != tc.span):
			t.Errorf("parseTraceParent(%q) = %+v, %v", tc.in, tp, err)
		}
	}
}

func TestTurnAt(t *testing.T) {
	at := func(s int) *time.Time { v := time.Unix(int64(s), 0); return &v }
	turns := []workspace.Turn{
		{TurnID: "1", Begun: at(10), Ended: at(20)},
		{TurnID: "ended-only", Ended: at(25)},
		{TurnID: "2", Begun: at(30)},
	}
	for _, tc := range []struct {
		t    int
		want string
	}{{5, ""}, {10, "1"}, {15, "1"}, {20, "1"}, {25, ""}, {30, "2"}, {99, "2"}} {
		if got := turnAt(turns, *at(tc.t)); got != tc.want {
			t.Errorf("turnAt(%d) = %q, want %q", tc.t, got, tc.want)
		}
	}
}

func kv(k string, v any) *common.KeyValue {
	switch x := v.(type) {
	case string:
		return &common.KeyValue{Key: k, Value: &common.AnyValue{Value: &common.AnyValue_StringValue{StringValue: x}}}
	case int64:
		return &common.KeyValue{Key: k, Value: &common.AnyValue{Value: &common.AnyValue_IntValue{IntValue: x}}}
	}
	panic(k)
}

// GenAI client metrics (gen_ai.client.token.usage, gen_ai.client.operation.duration) become one
// record per data point with the model from gen_ai.request.model.
func TestFromMetricsGenAI(t *testing.T) {
	req := &colmetrics.ExportMetricsServiceRequest{ResourceMetrics: []*metricspb.ResourceMetrics{{ScopeMetrics: []*metricspb.ScopeMetrics{{Metrics: []*metricspb.Metric{
		{Name: "gen_ai.client.token.usage", Unit: "{token}", Data: &metricspb.Metric_Histogram{Histogram: &metricspb.Histogram{DataPoints: []*metricspb.HistogramDataPoint{
			{Attributes: []*common.KeyValue{kv("gen_ai.request.model", "m1"), kv("gen_ai.token.type", "input")}, Count: 2, Sum: ptr(300.0), TimeUnixNano: 5},
		}}}},
		{Name: "queue", Data: &metricspb.Metric_Gauge{Gauge: &metricspb.Gauge{DataPoints: []*metricspb.NumberDataPoint{
			{Value: &metricspb.NumberDataPoint_AsInt{AsInt: 7}},
		}}}},
	}}}}}}
	type row struct {
		Name, Model, Unit string
		Value             float64
		Count             uint64
	}
	var got []row
	for _, r := range fromMetrics(req) {
		got = append(got, row{r.Name, r.Model, r.Unit, *r.Value, r.Count})
	}
	want := []row{{"gen_ai.client.token.usage", "m1", "{token}", 300, 2}, {"queue", "", "", 7, 0}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func ptr[T any](v T) *T { return &v }

func TestFromLogs(t *testing.T) {
	req := &collogs.ExportLogsServiceRequest{ResourceLogs: []*logspb.ResourceLogs{{ScopeLogs: []*logspb.ScopeLogs{{LogRecords: []*logspb.LogRecord{
		{EventName: "gen_ai.user.message", TimeUnixNano: 1e9, Body: &common.AnyValue{Value: &common.AnyValue_StringValue{StringValue: "hi"}}},
		{ObservedTimeUnixNano: 2e9, Attributes: []*common.KeyValue{kv("event.name", "tool.decision")}},
	}}}}}}
	recs := fromLogs(req)
	if len(recs) != 2 || recs[0].Name != "gen_ai.user.message" || recs[0].Attrs["body"] != "hi" || recs[1].Name != "tool.decision" || recs[1].Start.Unix() != 2 {
		t.Errorf("fromLogs: %+v", recs)
	}
}

// A session's journal is bounded: past SessionBytes it rotates (keeping one older file), and an
// agent keeps at most Sessions journals, the least recently written going first.
func TestJournalRetention(t *testing.T) {
	j := &journal{root: t.TempDir(), ret: Retention{SessionBytes: 4096, Sessions: 2}, size: map[string]int64{}}
	big := Record{Kind: KindEvent, Name: strings.Repeat("x", 1000)}
	for i := 0; i < 20; i++ {
		if err := j.append("a", "s", []Record{big}); err != nil {
			t.Fatal(err)
		}
	}
	recs, err := j.read("a", "s")
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) > 8 || len(recs) < 4 {
		t.Errorf("%d records kept of 20 with a 4 KiB bound, want 4 to 8", len(recs))
	}
	for _, p := range []string{"s.jsonl", "s.jsonl.1"} {
		if fi, err := os.Stat(filepath.Join(j.root, "a", p)); err != nil || fi.Size() > 4096 {
			t.Errorf("%s: %v, %v; want at most 4096 bytes", p, fi, err)
		}
	}
	for _, s := range []string{"t", "u"} {
		time.Sleep(10 * time.Millisecond)
		if err := j.append("a", s, []Record{{Kind: KindEvent}}); err != nil {
			t.Fatal(err)
		}
	}
	if got := j.sessions("a"); strings.Join(got, ",") != "t,u" {
		t.Errorf("sessions kept: %q, want t,u (s, the oldest, pruned)", got)
	}
}

func TestSummarize(t *testing.T) {
	usage := func(cpu, mem uint64) *cgroup.Usage { return &cgroup.Usage{CPUUsec: cpu, MemoryPeak: mem} }
	recs := []Record{
		{Kind: KindSpan, Category: CategoryTool, Tool: "grep", DurationMS: 10},
		{Kind: KindSpan, Category: CategoryTool, Tool: "grep", DurationMS: 30, Status: "error"},
		{Kind: KindSpan, Category: CategoryTool, Tool: "grep", DurationMS: 20},
		{Kind: KindSpan, Category: CategoryModel, Model: "m", DurationMS: 100, InputTokens: 5, OutputTokens: 7},
		{Kind: KindRun, RunID: "r1", Argv: []string{"make"}, Status: "error", Usage: usage(10, 300)},
		{Kind: KindRun, RunID: "r2", Argv: []string{"make"}, Status: "error", Usage: usage(30, 100)},
		{Kind: KindRun, RunID: "r3", Argv: []string{"ls"}, Usage: usage(20, 200)},
	}
	s := Summarize(recs, []workspace.Turn{{Outcome: workspace.TurnSucceeded}, {Outcome: workspace.TurnFailed}, {Outcome: workspace.TurnOpen}})
	if diff := cmp.Diff([]ToolSummary{{Tool: "grep", Calls: 3, Failures: 1, TotalMS: 60, P50MS: 20, P95MS: 30}}, s.Tools); diff != "" {
		t.Errorf("tools (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]ModelSummary{{Model: "m", Calls: 1, InputTokens: 5, OutputTokens: 7, P50MS: 100, P95MS: 100}}, s.Models); diff != "" {
		t.Errorf("models (-want +got):\n%s", diff)
	}
	if s.CostliestCPU[0].RunID != "r2" || s.CostliestMem[0].RunID != "r1" {
		t.Errorf("costliest: cpu %+v mem %+v", s.CostliestCPU, s.CostliestMem)
	}
	if diff := cmp.Diff([]FailedCommand{{Command: "make", Failures: 2, Runs: 2}}, s.FailedCommands); diff != "" {
		t.Errorf("failed commands (-want +got):\n%s", diff)
	}
	if s.Turns != (TurnSummary{Total: 3, Succeeded: 1, Failed: 1, Open: 1}) {
		t.Errorf("turns %+v", s.Turns)
	}
}

// The report names every turn and every tool, escapes what senders chose, and fetches nothing.
func TestReport(t *testing.T) {
	at := func(s int) *time.Time { v := time.Unix(int64(s), 0).UTC(); return &v }
	recs := []Record{
		{Kind: KindSpan, Category: CategoryTool, Tool: "read_file", Name: "execute_tool read_file", TurnID: "1", Start: *at(11), End: *at(12)},
		{Kind: KindSpan, Category: CategoryModel, Model: "m", Name: "chat m", TurnID: "2", Start: *at(21), End: *at(22)},
		{Kind: KindSpan, Category: CategoryTool, Tool: "<script>alert(1)</script>", TurnID: "2", Start: *at(23), End: *at(24)},
		{Kind: KindRun, Argv: []string{"make"}, TurnID: "2", Start: *at(23), End: *at(24), Usage: &cgroup.Usage{CPUUsec: 1500, MemoryPeak: 3 << 20}},
	}
	html, err := Report("a", "s", recs, []workspace.Turn{{TurnID: "1", Begun: at(10), Ended: at(15), Outcome: "succeeded"}, {TurnID: "2", Begun: at(20), Outcome: "open"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Turn 1", "Turn 2", "read_file", "chat m", "&lt;script&gt;", "CPU 1.5 ms", "memory peak 3.0 MiB", "default-src 'none'"} {
		if !strings.Contains(html, want) {
			t.Errorf("the report lacks %q", want)
		}
	}
	for _, bad := range []string{"<script>", "http://", "https://", "src="} {
		if strings.Contains(html, bad) {
			t.Errorf("the report has %q: it must be self-contained and inert", bad)
		}
	}
}

// ownCgroup is the cgroup v2 directory of the test process: the "session" of a receiver the test
// itself posts to.
func ownCgroup(tb testing.TB) string {
	tb.Helper()
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		tb.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "0::"); ok {
			for _, mnt := range []string{"/sys/fs/cgroup/unified", "/sys/fs/cgroup"} {
				if _, err := os.Stat(filepath.Join(mnt, "cgroup.controllers")); err == nil {
					return filepath.Join(mnt, rest)
				}
			}
		}
	}
	tb.Fatalf("no cgroup v2 line in /proc/self/cgroup: %q", b)
	return ""
}
