package monitor

import (
	"bytes"
	"fmt"
	"html/template"
	"path/filepath"
	"slices"
	"time"

	"github.com/allox-os/allox/services/internal/workspace"
)

// Report renders one session's trajectory as one self-contained HTML page (inline style, no
// script, nothing fetched): its summary, then a timeline of turns → model calls → tool calls →
// runs with their resource use, each a bar placed by its start and length within the session.
func Report(agent, session string, recs []Record, turns []workspace.Turn) (string, error) {
	v := reportView{Agent: agent, Session: session, Summary: Summarize(recs, turns)}
	var t0, t1 time.Time
	widen := func(a, b time.Time) {
		if !a.IsZero() && (t0.IsZero() || a.Before(t0)) {
			t0 = a
		}
		if b.After(t1) {
			t1 = b
		}
	}
	for _, r := range recs {
		if r.Kind == KindSpan || r.Kind == KindRun {
			widen(r.Start, r.End)
		}
	}
	for _, t := range turns {
		if t.Begun != nil {
			widen(*t.Begun, *t.Begun)
		}
		if t.Ended != nil {
			widen(*t.Ended, *t.Ended)
		}
	}
	span := t1.Sub(t0)
	if span <= 0 {
		span = time.Millisecond
	}
	bar := func(a, b time.Time) (float64, float64) {
		if a.IsZero() {
			return 0, 0
		}
		if b.Before(a) {
			b = a
		}
		return 100 * float64(a.Sub(t0)) / float64(span), max(0.3, 100*float64(b.Sub(a))/float64(span))
	}
	rows := map[string][]row{} // by turn id
	for _, r := range recs {
		if r.Kind != KindSpan && r.Kind != KindRun {
			continue
		}
		rw := row{Kind: r.Category, Name: r.Name, Start: r.Start, MS: r.DurationMS, Error: r.Error, Failed: r.Status == "error"}
		switch {
		case r.Kind == KindRun:
			rw.Kind, rw.Name, rw.Detail = "run", filepath.Base(r.Name), runDetail(r)
		case r.Category == CategoryModel:
			rw.Detail = fmt.Sprintf("%s · %d in / %d out tokens", r.Model, r.InputTokens, r.OutputTokens)
		case r.Category == CategoryTool && r.Tool != "":
			rw.Name = r.Tool
		}
		rw.Left, rw.Width = bar(r.Start, r.End)
		rows[r.TurnID] = append(rows[r.TurnID], rw)
	}
	order := map[string]int{CategoryAgent: 0, CategoryModel: 1, CategoryTool: 2, "run": 3, CategoryOther: 4}
	sortRows := func(rs []row) []row {
		slices.SortStableFunc(rs, func(a, b row) int {
			if c := a.Start.Compare(b.Start); c != 0 {
				return c
			}
			return order[a.Kind] - order[b.Kind]
		})
		return rs
	}
	for _, t := range turns {
		tv := turnView{ID: t.TurnID, Title: "Turn " + t.TurnID + " — " + t.Outcome, Outcome: t.Outcome, Checkpoint: t.Checkpoint, Rows: sortRows(rows[t.TurnID])}
		var end time.Time
		if t.Ended != nil {
			end = *t.Ended
		} else {
			end = t1
		}
		if t.Begun != nil {
			tv.Left, tv.Width = bar(*t.Begun, end)
		}
		delete(rows, t.TurnID)
		v.Turns = append(v.Turns, tv)
	}
	for _, id := range sortedKeys(rows) { // records of no turn (or of a turn the history lost)
		title := "Turn " + id + " (not in the session's history)"
		if id == "" {
			title = "Outside any turn"
		}
		v.Turns = append(v.Turns, turnView{ID: id, Title: title, Rows: sortRows(rows[id])})
	}
	var buf bytes.Buffer
	if err := reportTemplate.Execute(&buf, v); err != nil {
		return "", fmt.Errorf("monitor report: %w", err)
	}
	return buf.String(), nil
}

func runDetail(r Record) string {
	s := fmt.Sprintf("%v", r.Argv)
	if r.ExitCode != nil {
		s += fmt.Sprintf(" · exit %d", *r.ExitCode)
	}
	if u := r.Usage; u != nil {
		s += fmt.Sprintf(" · CPU %.1f ms · memory peak %.1f MiB · I/O %d B read, %d B written · pids peak %d",
			float64(u.CPUUsec)/1000, float64(u.MemoryPeak)/(1<<20), u.IORead, u.IOWrite, u.PidsPeak)
	}
	return s
}

type reportView struct {
	Agent, Session string
	Summary        Summary
	Turns          []turnView
}

type turnView struct {
	ID, Title, Outcome, Checkpoint string
	Left, Width                    float64
	Rows                           []row
}

type row struct {
	Kind, Name, Detail, Error string
	Failed                    bool
	Start                     time.Time
	MS                        float64
	Left, Width               float64
}

var reportTemplate = template.Must(template.New("report").Funcs(template.FuncMap{
	"pct": func(f float64) string { return fmt.Sprintf("%.2f%%", f) },
	"ms":  func(f float64) string { return fmt.Sprintf("%.1f ms", f) },
}).Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'">
<title>allox monitor: {{.Agent}}/{{.Session}}</title>
<style>
body{font:14px system-ui,sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:.2em .6em;text-align:left}
.turn{border:1px solid #999;margin:1em 0;padding:.4em}.turn h3{margin:.2em 0}
.row{display:flex;align-items:center;margin:2px 0}.label{width:32%;overflow:hidden;white-space:nowrap;text-overflow:ellipsis}
.lane{position:relative;flex:1;height:14px;background:#f3f3f3}.bar{position:absolute;top:0;height:14px}
.model{background:#6a5acd}.tool{background:#2e8b57}.run{background:#d2691e}.agent{background:#4682b4}.span{background:#999}
.turnbar{background:#bbb}.failed{outline:2px solid #c00}.detail{color:#555;font-size:12px;margin-left:32%}
</style></head><body>
<h1>Session {{.Agent}}/{{.Session}}</h1>
<h2>Summary</h2>
<p>Turns: {{.Summary.Turns.Total}} ({{.Summary.Turns.Succeeded}} succeeded, {{.Summary.Turns.Failed}} failed, {{.Summary.Turns.Open}} open) · records: {{.Summary.Records}}</p>
<table><tr><th>tool</th><th>calls</th><th>failures</th><th>total</th><th>p50</th><th>p95</th></tr>
{{range .Summary.Tools}}<tr class="tool-row"><td>{{.Tool}}</td><td>{{.Calls}}</td><td>{{.Failures}}</td><td>{{ms .TotalMS}}</td><td>{{ms .P50MS}}</td><td>{{ms .P95MS}}</td></tr>
{{end}}</table>
<table><tr><th>model</th><th>calls</th><th>errors</th><th>input tokens</th><th>output tokens</th><th>p50</th><th>p95</th></tr>
{{range .Summary.Models}}<tr><td>{{.Model}}</td><td>{{.Calls}}</td><td>{{.Errors}}</td><td>{{.InputTokens}}</td><td>{{.OutputTokens}}</td><td>{{ms .P50MS}}</td><td>{{ms .P95MS}}</td></tr>
{{end}}</table>
<h2>Timeline</h2>
{{range .Turns}}<div class="turn" id="turn-{{.ID}}"><h3>{{.Title}}{{if .Checkpoint}} · checkpoint {{.Checkpoint}}{{end}}</h3>
{{if .Width}}<div class="row"><div class="label">turn {{.ID}}</div><div class="lane"><div class="bar turnbar" style="left:{{pct .Left}};width:{{pct .Width}}"></div></div></div>{{end}}
{{range .Rows}}<div class="row"><div class="label">{{.Kind}}: {{.Name}} ({{ms .MS}})</div><div class="lane"><div class="bar {{.Kind}}{{if .Failed}} failed{{end}}" style="left:{{pct .Left}};width:{{pct .Width}}"></div></div></div>
{{if or .Detail .Error}}<div class="detail">{{.Detail}}{{if .Error}} · error: {{.Error}}{{end}}</div>{{end}}
{{end}}</div>
{{end}}</body></html>
`))
