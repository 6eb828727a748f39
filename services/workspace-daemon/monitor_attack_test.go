package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/allox-os/allox/internal/rpc"
	"github.com/allox-os/allox/internal/testenv"
	"github.com/allox-os/allox/services/internal/monitor"
	colmetrics "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"
)

// endpointOf is the OTLP endpoint the monitor gives the session's runs, as a run of it sees it
// (the run also moves the receiver into the session's own namespace, if it has one).
func endpointOf(t *testing.T, url, session string) string {
	t.Helper()
	r, stdout, stderr := monitorRun(t, url, session, map[string]any{"argv": []string{"/bin/sh", "-c", `echo "$OTEL_EXPORTER_OTLP_ENDPOINT $OTEL_EXPORTER_OTLP_PROTOCOL"`}})
	if !exited0(r) {
		t.Fatalf("echo the endpoint in %s: %+v %q", session, r, stderr)
	}
	ep, proto, _ := strings.Cut(strings.TrimSpace(stdout), " ")
	if !strings.HasPrefix(ep, "http://127.0.0.1:") || proto != "http/protobuf" {
		t.Fatalf("session %s's runs get endpoint %q protocol %q", session, ep, proto)
	}
	return ep
}

// monitorSession starts the monitor's daemon with agent a's session s in the daemon's own network
// namespace and returns the daemon's URL.
func monitorSession(t *testing.T) string {
	t.Helper()
	url := monitorDaemon(t)
	mustPost(t, url, `{"action":"agent.create","params":{"agent_id":"a"}}`)
	mustPost(t, url, `{"action":"session.create","params":{"agent_id":"a","session_id":"s","network":"disabled"}}`)
	return url
}

// relayedEndpoint is session's receiver as a process of the session reaches it: a socat run of
// the session relays connections from a free loopback port to ep, so the test, outside the
// session (which the receiver refuses), posts through a run of it.
func relayedEndpoint(t *testing.T, url, session, ep string) string {
	t.Helper()
	testenv.Tool(t, "socat", "apt-get install socat")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	p, _ := json.Marshal(map[string]any{"agent_id": "a", "session_id": session,
		"argv": []string{"socat", fmt.Sprintf("TCP-LISTEN:%d,bind=127.0.0.1,fork,reuseaddr", port), "TCP:" + strings.TrimPrefix(ep, "http://")}})
	var r rpc.Run
	raw, rerr := call(t, url, "", "process.start", string(p))
	if rerr != nil {
		t.Fatalf("the relay: %+v", rerr)
	}
	must(t, json.Unmarshal(raw, &r))
	t.Cleanup(func() { call(t, url, "", "process.kill", `{"run_id":"`+r.RunID+`"}`) })
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	for range 100 {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return "http://" + addr
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("the session's relay never listened on %s", addr)
	return ""
}

func spanNames(t *testing.T, url, session string) []string {
	t.Helper()
	var out []string
	for _, r := range records(t, url, session, monitor.KindSpan) {
		out = append(out, r.Name)
	}
	return out
}

// TestMonitorSessionsApart attacks the receivers' boundary: a session's spans are the session's
// by where they arrive; an isolated session's receiver lives inside its own namespace, where its
// runs reach it and no other session's can; monitor.span on the session socket is about the
// caller's session only.
func TestMonitorSessionsApart(t *testing.T) {
	url := monitorDaemon(t)
	mustPost(t, url, `{"action":"agent.create","params":{"agent_id":"a"}}`)
	mustPost(t, url, `{"action":"session.create","params":{"agent_id":"a","session_id":"iso"}}`) // the daemon's default: isolated
	mustPost(t, url, `{"action":"session.create","params":{"agent_id":"a","session_id":"open","network":"disabled"}}`)
	isoAgent, openAgent := installAgent(t, url, "iso"), installAgent(t, url, "open")
	isoEP, openEP := endpointOf(t, url, "iso"), endpointOf(t, url, "open")
	if isoEP == openEP {
		t.Fatalf("two sessions share the endpoint %s", isoEP)
	}

	t.Run("an isolated session's run reaches its own receiver", func(t *testing.T) {
		r, _, stderr := monitorRun(t, url, "iso", map[string]any{"argv": []string{"/bin/sh", "-c", isoAgent + ` post "$OTEL_EXPORTER_OTLP_ENDPOINT"`}})
		if !exited0(r) {
			t.Fatalf("post to its own receiver: %+v %q", r, stderr)
		}
		if got := spanNames(t, url, "iso"); len(got) != 1 || got[0] != "injected" {
			t.Errorf("iso's spans: %q, want its one", got)
		}
	})
	t.Run("a proxy session's run reaches its own receiver past its proxy", func(t *testing.T) {
		mustPost(t, url, `{"action":"session.create","params":{"agent_id":"a","session_id":"px","network":"proxy"}}`)
		pxAgent := installAgent(t, url, "px")
		r, _, stderr := monitorRun(t, url, "px", map[string]any{"argv": []string{"/bin/sh", "-c", pxAgent + ` post "$OTEL_EXPORTER_OTLP_ENDPOINT"`}})
		if !exited0(r) {
			t.Fatalf("post to its own receiver with HTTP_PROXY set: %+v %q", r, stderr)
		}
		if got := spanNames(t, url, "px"); len(got) != 1 {
			t.Errorf("px's spans: %q, want its one", got)
		}
	})
	t.Run("another session cannot reach an isolated session's receiver", func(t *testing.T) {
		r, _, stderr := monitorRun(t, url, "open", map[string]any{"argv": []string{openAgent, "post", isoEP}})
		if exited0(r) {
			t.Errorf("a run of session open exported to iso's receiver %s", isoEP)
		}
		t.Logf("refused: %s", strings.TrimSpace(stderr))
		if got := spanNames(t, url, "iso"); len(got) != 1 {
			t.Errorf("iso's spans after the attack: %q, want its own one alone", got)
		}
		if got := spanNames(t, url, "open"); len(got) != 0 {
			t.Errorf("open's spans: %q, want none", got)
		}
	})
	t.Run("the guest cannot reach an isolated session's receiver", func(t *testing.T) {
		if resp, err := http.Post(isoEP+"/v1/traces", "application/json", strings.NewReader(`{}`)); err == nil {
			resp.Body.Close()
			t.Errorf("POST %s from the guest's namespace: %s, want no listener there", isoEP, resp.Status)
		}
	})
	t.Run("a session's receiver keeps its spans", func(t *testing.T) {
		r, _, stderr := monitorRun(t, url, "open", map[string]any{"argv": []string{openAgent, "post", openEP}})
		if !exited0(r) {
			t.Fatalf("post to its own receiver: %+v %q", r, stderr)
		}
		if got := spanNames(t, url, "open"); len(got) != 1 {
			t.Errorf("open's spans: %q, want its one", got)
		}
		if got := spanNames(t, url, "iso"); len(got) != 1 {
			t.Errorf("iso's spans: %q, want its own one alone", got)
		}
	})
	t.Run("another network-disabled session cannot post to a disabled session's receiver", func(t *testing.T) {
		mustPost(t, url, `{"action":"session.create","params":{"agent_id":"a","session_id":"open2","network":"disabled"}}`)
		open2Agent := installAgent(t, url, "open2")
		r, _, stderr := monitorRun(t, url, "open2", map[string]any{"argv": []string{open2Agent, "post", openEP}})
		if exited0(r) {
			t.Errorf("a run of session open2 exported to open's receiver %s (both in the guest's namespace)", openEP)
		}
		t.Logf("refused: %s", strings.TrimSpace(stderr))
		if got := spanNames(t, url, "open"); len(got) != 1 {
			t.Errorf("open's spans after the attack: %q, want its own one alone", got)
		}
	})
	t.Run("the guest cannot post to a disabled session's receiver", func(t *testing.T) {
		resp, err := http.Post(openEP+"/v1/traces", "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("POST %s from a process outside the session: %s, want 403", openEP, resp.Status)
		}
	})
	t.Run("allox monitor span is the caller's session's", func(t *testing.T) {
		r, _, stderr := monitorRun(t, url, "open", map[string]any{"argv": []string{"/run/allox/bin/allox", "monitor", "span", "read_file",
			"--category", "tool", "--duration-ms", "5", "--attr", "gen_ai.tool.name=read_file", "--attr", "bytes=42"}})
		if !exited0(r) {
			t.Fatalf("allox monitor span: %+v %q", r, stderr)
		}
		var found bool
		for _, rec := range records(t, url, "open", monitor.KindSpan) {
			if rec.Name == "read_file" {
				found = rec.Source == monitor.SourceAPI && rec.Category == monitor.CategoryTool && rec.Tool == "read_file" && rec.DurationMS == 5 && rec.Attrs["bytes"] == float64(42)
				if !found {
					t.Errorf("allox monitor span's record: %+v", rec)
				}
			}
		}
		if !found {
			t.Error("allox monitor span recorded nothing in the caller's session")
		}
		r, _, stderr = monitorRun(t, url, "open", map[string]any{"argv": []string{"/run/allox/bin/allox", "call", "monitor.span", `{"session_id":"iso","name":"forged"}`}})
		if exited0(r) || !strings.Contains(stderr, "forbidden") {
			t.Errorf("monitor.span naming another session from the session socket: %+v %q, want forbidden", r, stderr)
		}
		if got := spanNames(t, url, "iso"); len(got) != 1 {
			t.Errorf("iso's spans after the forged monitor.span: %q", got)
		}
	})
}

// TestMonitorMalformedOTLP: malformed exports are refused with a 4xx and a google.rpc.Status that
// says why, nothing is stored, and the receiver keeps serving.
func TestMonitorMalformedOTLP(t *testing.T) {
	url := monitorSession(t)
	ep := relayedEndpoint(t, url, "s", endpointOf(t, url, "s"))
	valid := func(n int) []byte {
		ss := &tracepb.ScopeSpans{}
		for i := 0; i < n; i++ {
			ss.Spans = append(ss.Spans, &tracepb.Span{TraceId: bytes.Repeat([]byte{1}, 16), SpanId: []byte{1, 2, 3, 4, 5, 6, 7, byte(i)}, Name: "span",
				StartTimeUnixNano: 1, EndTimeUnixNano: 2})
		}
		b, err := proto.Marshal(&coltrace.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{{ScopeSpans: []*tracepb.ScopeSpans{ss}}}})
		must(t, err)
		return b
	}
	one := valid(1)
	for _, tc := range []struct {
		name, path, ct string
		body           []byte
		code           int
		reason         string
	}{
		{"truncated protobuf", "/v1/traces", "application/x-protobuf", one[:len(one)-3], 400, "not an OTLP ExportTraceServiceRequest"},
		{"wrong content type", "/v1/traces", "text/plain", one, 415, "Content-Type"},
		{"no content type", "/v1/traces", "", one, 415, "Content-Type"},
		{"malformed JSON", "/v1/traces", "application/json", []byte(`{"resourceSpans":[{`), 400, "not an OTLP ExportTraceServiceRequest"},
		{"JSON of the wrong shape", "/v1/traces", "application/json", []byte(`{"resourceSpans":"x"}`), 400, "not an OTLP"},
		{"oversized batch", "/v1/traces", "application/x-protobuf", valid(monitor.MaxSpans + 1), 413, "spans, more than"},
		{"oversized body", "/v1/logs", "application/x-protobuf", bytes.Repeat([]byte{0}, monitor.MaxBodyBytes+1), 413, "over"},
		{"unknown path", "/v1/profiles", "application/x-protobuf", one, 404, "no OTLP endpoint"},
		{"metrics as traces", "/v1/metrics", "application/x-protobuf", []byte{0xff, 0xff, 0xff}, 400, "ExportMetricsServiceRequest"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodPost, ep+tc.path, bytes.NewReader(tc.body))
			must(t, err)
			if tc.ct != "" {
				req.Header.Set("Content-Type", tc.ct)
			}
			resp, err := http.DefaultClient.Do(req)
			must(t, err)
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.code {
				t.Errorf("status %s, want %d (body %q)", resp.Status, tc.code, body)
			}
			var st status.Status
			if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/x-protobuf") {
				must(t, proto.Unmarshal(body, &st))
			} else {
				var js struct{ Message string }
				must(t, json.Unmarshal(body, &js))
				st.Message = js.Message
			}
			if !strings.Contains(st.Message, tc.reason) {
				t.Errorf("reason %q, want it to say %q", st.Message, tc.reason)
			}
			if n := len(records(t, url, "s", "")); n != 1 { // the echo's run record alone
				t.Errorf("%d records after a refused export, want the one run", n)
			}
		})
	}
	for _, ct := range []string{"application/x-protobuf", "application/json"} {
		body := one
		if ct == "application/json" {
			body = []byte(`{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"0102030405060708090a0b0c0d0e0f10","spanId":"0102030405060708","name":"as json","startTimeUnixNano":"1","endTimeUnixNano":"2"}]}]}]}`)
		}
		resp, err := http.Post(ep+"/v1/traces", ct, bytes.NewReader(body))
		must(t, err)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("a valid %s export after the refusals: %s", ct, resp.Status)
		}
	}
	if got := spanNames(t, url, "s"); strings.Join(got, ",") != "span,as json" {
		t.Errorf("spans after the valid exports: %q", got)
	}
}

// TestMonitorMetricsAndLogs: OTLP metrics (a GenAI client histogram, by protobuf) and logs (an
// event, by JSON) through a session's real receiver become records with the model, value, count
// and event name.
func TestMonitorMetricsAndLogs(t *testing.T) {
	url := monitorSession(t)
	ep := relayedEndpoint(t, url, "s", endpointOf(t, url, "s"))
	str := func(k, v string) *commonpb.KeyValue {
		return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v}}}
	}
	sum := 300.0
	point := &metricspb.HistogramDataPoint{Count: 2, Sum: &sum, TimeUnixNano: 1,
		Attributes: []*commonpb.KeyValue{str("gen_ai.request.model", "test-model"), str("gen_ai.token.type", "input")}}
	metric := &metricspb.Metric{Name: "gen_ai.client.token.usage", Unit: "{token}",
		Data: &metricspb.Metric_Histogram{Histogram: &metricspb.Histogram{DataPoints: []*metricspb.HistogramDataPoint{point}}}}
	metrics, err := proto.Marshal(&colmetrics.ExportMetricsServiceRequest{ResourceMetrics: []*metricspb.ResourceMetrics{
		{ScopeMetrics: []*metricspb.ScopeMetrics{{Metrics: []*metricspb.Metric{metric}}}}}})
	must(t, err)
	logs := `{"resourceLogs":[{"scopeLogs":[{"logRecords":[{"timeUnixNano":"1000","eventName":"gen_ai.user.message","body":{"stringValue":"hello"}}]}]}]}`
	for _, e := range []struct{ path, ct, body string }{{"/v1/metrics", "application/x-protobuf", string(metrics)}, {"/v1/logs", "application/json", logs}} {
		resp, err := http.Post(ep+e.path, e.ct, strings.NewReader(e.body))
		must(t, err)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("POST %s: %s", e.path, resp.Status)
		}
	}
	m := records(t, url, "s", monitor.KindMetric)
	if len(m) != 1 || m[0].Name != "gen_ai.client.token.usage" || m[0].Model != "test-model" || m[0].Value == nil || *m[0].Value != 300 || m[0].Count != 2 || m[0].Unit != "{token}" || m[0].SessionID != "s" {
		t.Errorf("metric records: %+v", m)
	}
	ev := records(t, url, "s", monitor.KindEvent)
	if len(ev) != 1 || ev[0].Name != "gen_ai.user.message" || ev[0].Attrs["body"] != "hello" || ev[0].Source != monitor.SourceOTLP {
		t.Errorf("event records: %+v", ev)
	}
}

// TestMonitorBadTraceparent: a process.start whose traceparent is not a W3C traceparent is refused
// naming params.traceparent, and nothing runs.
func TestMonitorBadTraceparent(t *testing.T) {
	url := monitorSession(t)
	for _, tp := range []string{`"00-zz-00f067aa0ba902b7-01"`, `42`, `"00-00000000000000000000000000000000-00f067aa0ba902b7-01"`} {
		_, rerr := call(t, url, "", "process.start", `{"agent_id":"a","session_id":"s","argv":["/bin/true"],"traceparent":`+tp+`}`)
		if rerr == nil || rerr.Field != "params.traceparent" {
			t.Errorf("traceparent %s: %+v, want refused naming params.traceparent", tp, rerr)
		}
	}
	var list struct{ Runs []json.RawMessage }
	must(t, json.Unmarshal(mustPost(t, url, `{"action":"process.list","params":{"agent_id":"a","session_id":"s"}}`), &list))
	if len(list.Runs) != 0 {
		t.Errorf("runs after the refusals: %d, want none", len(list.Runs))
	}
}

// TestMonitorExportUpstream: with --monitor-export, what a session's run reports reaches the
// platform's collector, with the session and the run named, while the run itself is not held up.
func TestMonitorExportUpstream(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]map[string]string{} // span name → its string attributes
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req coltrace.ExportTraceServiceRequest
		if r.URL.Path != "/v1/traces" || proto.Unmarshal(body, &req) != nil {
			http.Error(w, "want an OTLP trace export", http.StatusBadRequest)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		for _, rs := range req.GetResourceSpans() {
			for _, ss := range rs.GetScopeSpans() {
				for _, s := range ss.GetSpans() {
					attrs := map[string]string{}
					for _, kv := range s.GetAttributes() {
						attrs[kv.GetKey()] = kv.GetValue().GetStringValue()
					}
					seen[s.GetName()] = attrs
				}
			}
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer collector.Close()
	url := monitorDaemon(t, "--monitor-export", collector.URL)
	mustPost(t, url, `{"action":"agent.create","params":{"agent_id":"a"}}`)
	mustPost(t, url, `{"action":"session.create","params":{"agent_id":"a","session_id":"s","network":"disabled"}}`)
	agent := installAgent(t, url, "s")
	r, _, stderr := monitorRun(t, url, "s", map[string]any{"argv": []string{"/bin/sh", "-c", agent + ` post "$OTEL_EXPORTER_OTLP_ENDPOINT"`}})
	if !exited0(r) {
		t.Fatalf("post: %+v %q", r, stderr)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		mu.Lock()
		injected, run := seen["injected"], seen["/bin/sh"]
		mu.Unlock()
		if injected != nil && run != nil {
			if injected["allox.session_id"] != "s" || injected["allox.source"] != "otlp" || run["allox.run_id"] != r.RunID || run["allox.kind"] != "run" {
				t.Errorf("upstream: span %v, run %v", injected, run)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the collector has %v after 30 s, want the run's span and the run", seen)
		}
	}
}
