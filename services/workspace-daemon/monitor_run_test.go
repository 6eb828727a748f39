package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/allox-os/allox/internal/rpc"
	"github.com/allox-os/allox/internal/testenv"
	"github.com/allox-os/allox/services/internal/monitor"
	"github.com/google/go-cmp/cmp"
)

// builtMonitor is the daemon as mkimage builds it for plugins = ["monitor", "session-network"].
var builtMonitor = sync.OnceValues(func() (string, error) { return goBuild("allox_monitor,allox_session_network") })

// builtOtelAgent is the tests' agent (testdata/otelagent), static, to copy into a session.
var builtOtelAgent = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "otelagent")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "otelagent")
	cmd := exec.Command("go", "build", "-trimpath", "-o", bin, "./testdata/otelagent")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./testdata/otelagent: %w\n%s", err, out)
	}
	return bin, nil
})

// monitorDaemon starts the daemon with the monitor (and the session network, for isolated
// sessions) and returns its loopback URL.
func monitorDaemon(t *testing.T, extra ...string) string {
	t.Helper()
	bin, err := builtMonitor()
	must(t, err)
	policy := filepath.Join(t.TempDir(), "policy")
	must(t, os.WriteFile(policy, []byte("allow cidr 127.0.0.1/32\n"), 0o600))
	args := append([]string{"--monitor-root", filepath.Join(t.TempDir(), "monitor"), "--session-network", "isolated",
		"--session-network-policy", policy}, extra...)
	return daemonOn(t, bin, btrfsRoot(t), args...)
}

// installAgent copies the test agent into a session's current/ and returns its path there.
func installAgent(t *testing.T, url, session string) string {
	t.Helper()
	src, err := builtOtelAgent()
	must(t, err)
	data, err := os.ReadFile(src)
	must(t, err)
	dst := filepath.Join(getSession(t, url, session).Current, "otelagent")
	must(t, os.WriteFile(dst, data, 0o755))
	return dst
}

// monitorRun runs argv in a session and returns the ended run and its stdout and stderr.
func monitorRun(t *testing.T, url, session string, params map[string]any) (rpc.Run, string, string) {
	t.Helper()
	params["agent_id"], params["session_id"] = "a", session
	p, _ := json.Marshal(params)
	var r rpc.Run
	raw, rerr := call(t, url, "", "process.start", string(p))
	if rerr != nil {
		t.Fatalf("process.start %s: %+v", p, rerr)
	}
	must(t, json.Unmarshal(raw, &r))
	must(t, json.Unmarshal(mustPost(t, url, `{"action":"process.wait","params":{"run_id":"`+r.RunID+`"}}`), &r))
	var out [2]rpc.Output
	for i, stream := range []string{"stdout", "stderr"} {
		must(t, json.Unmarshal(mustPost(t, url, `{"action":"process.output","params":{"run_id":"`+r.RunID+`","stream":"`+stream+`"}}`), &out[i]))
	}
	return r, out[0].Data, out[1].Data
}

// agentTurn runs the agent's turn in session and plays the harness outside: for each tool call
// the agent announces with its traceparent, it starts the tool's run by process.start (the busy
// loop with the traceparent as a param, the allocation with it as the run's TRACEPARENT), waits
// for it and tells the agent. It returns the agent's ended run, and each tool's run and span id.
func agentTurn(t *testing.T, url, session, agent string) (rpc.Run, map[string]string, map[string]string) {
	t.Helper()
	var r rpc.Run
	p, _ := json.Marshal(map[string]any{"agent_id": "a", "session_id": session, "argv": []string{agent, "turn"}})
	raw, rerr := call(t, url, "", "process.start", string(p))
	if rerr != nil {
		t.Fatalf("process.start the agent: %+v", rerr)
	}
	must(t, json.Unmarshal(raw, &r))
	current := getSession(t, url, session).Current
	toolRun, toolSpan := map[string]string{}, map[string]string{}
	for _, tool := range []struct {
		name string
		argv []string
	}{{"busy", []string{agent, "busy", "400"}}, {"alloc", []string{agent, "alloc", "96"}}} {
		tp := awaitLine(t, url, r.RunID, "tool "+tool.name+" ")
		params := map[string]any{"argv": tool.argv}
		if tool.name == "busy" {
			params["traceparent"] = tp
		} else {
			params["env"] = map[string]string{"TRACEPARENT": tp}
		}
		tr, _, stderr := monitorRun(t, url, session, params)
		if !exited0(tr) {
			t.Fatalf("tool %s's run: %+v, stderr %q", tool.name, tr, stderr)
		}
		toolRun[tool.name], toolSpan[tool.name] = tr.RunID, strings.Split(tp, "-")[2]
		must(t, os.WriteFile(filepath.Join(current, tool.name+".done"), nil, 0o644))
	}
	must(t, json.Unmarshal(mustPost(t, url, `{"action":"process.wait","params":{"run_id":"`+r.RunID+`"}}`), &r))
	if !exited0(r) {
		var out rpc.Output
		must(t, json.Unmarshal(mustPost(t, url, `{"action":"process.output","params":{"run_id":"`+r.RunID+`","stream":"stderr"}}`), &out))
		t.Fatalf("the agent's run: %+v, stderr %q", r, out.Data)
	}
	return r, toolRun, toolSpan
}

// awaitLine waits for a line of the run's stdout that starts with prefix and returns its rest.
func awaitLine(t *testing.T, url, runID, prefix string) string {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		var out rpc.Output
		must(t, json.Unmarshal(mustPost(t, url, `{"action":"process.output","params":{"run_id":"`+runID+`","stream":"stdout"}}`), &out))
		for _, line := range strings.Split(out.Data, "\n") {
			if rest, ok := strings.CutPrefix(line, prefix); ok {
				return rest
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s printed no %q in a minute: %q", runID, prefix, out.Data)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func records(t *testing.T, url, session, kind string) []monitor.Record {
	t.Helper()
	var res struct{ Records []monitor.Record }
	must(t, json.Unmarshal(mustPost(t, url, `{"action":"monitor.records","params":{"agent_id":"a","session_id":"`+session+`","kind":"`+kind+`"}}`), &res))
	return res.Records
}

// TestMonitorInARealRun: the test agent, inside a real sandboxed run and configured only by the
// environment the plugin gives it, reports one turn (an agent span, a model call, two tool calls
// each starting a run) with the OpenTelemetry Go SDK; the stored trajectory, its links to the
// session, turn and spans, the runs' resource use and the summary are checked field by field,
// through the control listener and through allox monitor in the session.
func TestMonitorInARealRun(t *testing.T) {
	url := monitorDaemon(t)
	mustPost(t, url, `{"action":"agent.create","params":{"agent_id":"a"}}`)
	mustPost(t, url, `{"action":"session.create","params":{"agent_id":"a","session_id":"s1","network":"disabled"}}`)
	agent := installAgent(t, url, "s1")
	mustPost(t, url, `{"action":"turn.begin","params":{"agent_id":"a","session_id":"s1","turn_id":"1"}}`)
	r, toolRun, toolSpan := agentTurn(t, url, "s1", agent)
	mustPost(t, url, `{"action":"turn.end","params":{"agent_id":"a","session_id":"s1","turn_id":"1","success":true}}`)

	spans := records(t, url, "s1", monitor.KindSpan)
	type spanRow struct{ Name, Category, Model, Tool, Turn, Service, Session, Source string }
	var got []spanRow
	var traceID string
	for _, s := range spans {
		got = append(got, spanRow{s.Name, s.Category, s.Model, s.Tool, s.TurnID, s.Service, s.SessionID, s.Source})
		if traceID == "" {
			traceID = s.TraceID
		} else if s.TraceID != traceID {
			t.Errorf("span %s: trace %s, want the turn's one trace %s", s.Name, s.TraceID, traceID)
		}
		if s.Name == "chat test-model" && (s.InputTokens != 123 || s.OutputTokens != 45 || s.DurationMS < 20) {
			t.Errorf("the model call: %+v, want 123 in, 45 out, at least 20 ms", s)
		}
		if tool := s.Tool; tool != "" && s.SpanID != toolSpan[tool] {
			t.Errorf("tool span %s: id %s, the agent's was %s", tool, s.SpanID, toolSpan[tool])
		}
	}
	slices.SortFunc(got, func(a, b spanRow) int { return strings.Compare(a.Name, b.Name) })
	want := []spanRow{
		{"chat test-model", "model", "test-model", "", "1", "otelagent", "s1", "otlp"},
		{"execute_tool alloc", "tool", "", "alloc", "1", "otelagent", "s1", "otlp"},
		{"execute_tool busy", "tool", "", "busy", "1", "otelagent", "s1", "otlp"},
		{"invoke_agent otelagent", "agent", "", "", "1", "otelagent", "s1", "otlp"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the stored spans (-want +got):\n%s", diff)
	}

	// Each tool's run is linked to its tool span (by the traceparent param, then by the run's
	// TRACEPARENT), the agent's own run to the open turn; each carries its cgroup's usage.
	var info struct {
		Limits *rpc.LimitsInfo `json:"limits"`
	}
	must(t, json.Unmarshal(mustPost(t, url, `{"action":"system.info"}`), &info))
	memory := info.Limits != nil && slices.Contains(info.Limits.Controllers, "memory")
	runs := map[string]monitor.Record{}
	for _, rec := range records(t, url, "s1", monitor.KindRun) {
		runs[rec.RunID] = rec
	}
	for tool, link := range map[string]string{"busy": "traceparent", "alloc": "env"} {
		rec, ok := runs[toolRun[tool]]
		switch {
		case !ok:
			t.Errorf("no run record for %s's run %s", tool, toolRun[tool])
			continue
		case rec.ParentSpanID != toolSpan[tool] || rec.TraceID != traceID || rec.Link != link || rec.TurnID != "1":
			t.Errorf("%s's run: parent %s trace %s link %q turn %q; want %s %s %q \"1\"", tool, rec.ParentSpanID, rec.TraceID, rec.Link, rec.TurnID, toolSpan[tool], traceID, link)
		case rec.Usage == nil || rec.ExitCode == nil || *rec.ExitCode != 0:
			t.Errorf("%s's run: usage %+v exit %v", tool, rec.Usage, rec.ExitCode)
		}
	}
	if rec := runs[r.RunID]; rec.Link != "turn" || rec.TurnID != "1" || rec.ParentSpanID != "" {
		t.Errorf("the agent's own run: %+v, want linked to turn 1 alone", rec)
	}
	if u := runs[toolRun["busy"]].Usage; u == nil || u.CPUUsec < 100_000 {
		t.Errorf("the busy loop's CPU time: %+v, want at least 100 ms of its 400 ms spin", u)
	}
	if u := runs[toolRun["alloc"]].Usage; memory && (u == nil || u.MemoryPeak <= 64<<20) {
		t.Errorf("the 96 MiB allocation's memory peak: %+v, want above 64 MiB", u)
	} else if !memory {
		t.Logf("no memory controller for the runs here (a hybrid host): the memory peak is checked in the QEMU test")
	}

	// The summary, from the control listener and from allox monitor summary inside the session.
	var sum monitor.Summary
	must(t, json.Unmarshal(mustPost(t, url, `{"action":"monitor.summary","params":{"agent_id":"a","session_id":"s1"}}`), &sum))
	checkSummary(t, "monitor.summary", sum, toolRun["busy"])
	r2, out2, err2 := monitorRun(t, url, "s1", map[string]any{"argv": []string{"/run/allox/bin/allox", "monitor", "summary"}})
	if !exited0(r2) {
		t.Fatalf("allox monitor summary: %+v %q", r2, err2)
	}
	var inSession monitor.Summary
	must(t, json.Unmarshal([]byte(out2), &inSession))
	checkSummary(t, "allox monitor summary", inSession, toolRun["busy"])
	var across monitor.Summary
	must(t, json.Unmarshal(mustPost(t, url, `{"action":"monitor.summary","params":{"agent_id":"a"}}`), &across))
	if across.Sessions != 1 || across.SessionID != "" {
		t.Errorf("monitor.summary across the agent: %d sessions, session %q; want 1 and none", across.Sessions, across.SessionID)
	}
	checkSummary(t, "monitor.summary across the agent", across, toolRun["busy"])
	var sess struct {
		Plugins map[string]map[string]string `json:"plugins"`
	}
	must(t, json.Unmarshal(mustPost(t, url, `{"action":"session.get","params":{"agent_id":"a","session_id":"s1"}}`), &sess))
	if ep := sess.Plugins["monitor"]["otlp_endpoint"]; !strings.HasPrefix(ep, "http://127.0.0.1:") {
		t.Errorf("session.get plugins.monitor: %v, want the session's otlp_endpoint", sess.Plugins)
	}

	t.Run("the report in a real browser, with no network", func(t *testing.T) {
		r, _, stderr := monitorRun(t, url, "s1", map[string]any{"argv": []string{"/run/allox/bin/allox", "monitor", "report", "-o", "report.html"}})
		if !exited0(r) {
			t.Fatalf("allox monitor report: %+v %q", r, stderr)
		}
		browseReport(t, filepath.Join(getSession(t, url, "s1").Current, "report.html"),
			[]string{"Turn 1 — succeeded", "tool: busy", "tool: alloc", "model: chat test-model", "agent: invoke_agent otelagent", "test-model · 123 in / 45 out tokens",
				"run: otelagent", "otelagent busy 400] · exit 0 · CPU", "Outside any turn"})
	})
}

// browseReport loads the report in Debian's headless chromium inside a network namespace of its
// own (no network at all), checks that the rendered page names every want, and keeps a screenshot
// under out/test-artifacts/.
func browseReport(t *testing.T, report string, want []string) {
	t.Helper()
	chromium := testenv.Tool(t, "chromium", "apt-get install chromium (ci/deps.sh)")
	unshare := testenv.Tool(t, "unshare", "apt-get install util-linux")
	dir := t.TempDir()
	page := filepath.Join(dir, "report.html")
	data, err := os.ReadFile(report)
	must(t, err)
	must(t, os.WriteFile(page, data, 0o644))
	browse := func(args ...string) []byte {
		args = append([]string{"-n", chromium, "--headless", "--no-sandbox", "--disable-gpu", "--user-data-dir=" + filepath.Join(dir, "profile"),
			"--window-size=1280,1400"}, append(args, "file://"+page)...)
		cmd := exec.Command(unshare, args...)
		cmd.Env = append(os.Environ(), "HOME="+dir)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("chromium %v: %v", args, err)
		}
		return out
	}
	dom := string(browse("--dump-dom"))
	for _, w := range want {
		if !strings.Contains(dom, w) {
			t.Errorf("the rendered report does not show %q", w)
		}
	}
	shot := filepath.Join(dir, "report.png")
	browse("--screenshot=" + shot)
	png, err := os.ReadFile(shot)
	if err != nil || !bytes.HasPrefix(png, []byte("\x89PNG")) {
		t.Fatalf("chromium's screenshot: %v (%d bytes)", err, len(png))
	}
	keep := filepath.Join(testenv.Out(), "test-artifacts", "monitor-report.png")
	if err := os.MkdirAll(filepath.Dir(keep), 0o755); err == nil && os.WriteFile(keep, png, 0o644) == nil {
		t.Logf("the report's screenshot: %s", keep)
	}
}

func checkSummary(t *testing.T, what string, s monitor.Summary, busyRun string) {
	t.Helper()
	if s.Turns != (monitor.TurnSummary{Total: 1, Succeeded: 1}) {
		t.Errorf("%s turns: %+v, want one, succeeded", what, s.Turns)
	}
	var tools []string
	for _, tl := range s.Tools {
		tools = append(tools, fmt.Sprintf("%s:%d:%d", tl.Tool, tl.Calls, tl.Failures))
		if tl.P50MS <= 0 || tl.P95MS < tl.P50MS || tl.TotalMS < tl.P50MS {
			t.Errorf("%s tool %s: durations %+v", what, tl.Tool, tl)
		}
	}
	slices.Sort(tools)
	if diff := cmp.Diff([]string{"alloc:1:0", "busy:1:0"}, tools); diff != "" {
		t.Errorf("%s tools (-want +got):\n%s", what, diff)
	}
	if len(s.Models) != 1 || s.Models[0].Model != "test-model" || s.Models[0].Calls != 1 || s.Models[0].InputTokens != 123 || s.Models[0].OutputTokens != 45 {
		t.Errorf("%s models: %+v", what, s.Models)
	}
	if len(s.CostliestCPU) == 0 || s.CostliestCPU[0].RunID != busyRun {
		t.Errorf("%s costliest by CPU: %+v, want the busy loop's run %s first", what, s.CostliestCPU, busyRun)
	}
}
