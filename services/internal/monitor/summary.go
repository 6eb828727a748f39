package monitor

import (
	"context"
	"math"
	"slices"
	"strings"

	"github.com/allox-os/allox/internal/rpc"
	"github.com/allox-os/allox/services/internal/plugin"
	"github.com/allox-os/allox/services/internal/workspace"
)

// Summary is monitor.summary's result: one session's, or every session's of an agent.
type Summary struct {
	AgentID   string `json:"agent_id"`
	SessionID string `json:"session_id,omitempty"` // absent: across the agent's sessions
	Sessions  int    `json:"sessions"`
	Records   int    `json:"records"`

	Turns          TurnSummary     `json:"turns"`
	Tools          []ToolSummary   `json:"tools"`
	Models         []ModelSummary  `json:"models"`
	CostliestCPU   []RunSummary    `json:"costliest_runs_by_cpu"`
	CostliestMem   []RunSummary    `json:"costliest_runs_by_memory"`
	FailedCommands []FailedCommand `json:"failed_commands"`
}

// TurnSummary counts turns by outcome.
type TurnSummary struct {
	Total     int `json:"total"`
	Succeeded int `json:"succeeded"`
	Failed    int `json:"failed"`
	Open      int `json:"open"`
}

// ToolSummary is one tool's calls.
type ToolSummary struct {
	Tool     string  `json:"tool"`
	Calls    int     `json:"calls"`
	Failures int     `json:"failures"`
	TotalMS  float64 `json:"total_ms"`
	P50MS    float64 `json:"p50_ms"`
	P95MS    float64 `json:"p95_ms"`
}

// ModelSummary is one model's calls (GenAI conventions: gen_ai.request.model, gen_ai.usage.*).
type ModelSummary struct {
	Model        string  `json:"model"`
	Calls        int     `json:"calls"`
	Errors       int     `json:"errors"`
	InputTokens  int64   `json:"input_tokens"`
	OutputTokens int64   `json:"output_tokens"`
	P50MS        float64 `json:"p50_ms"`
	P95MS        float64 `json:"p95_ms"`
}

// RunSummary is one run and what it used.
type RunSummary struct {
	SessionID  string   `json:"session_id"`
	RunID      string   `json:"run_id"`
	Argv       []string `json:"argv"`
	TurnID     string   `json:"turn_id,omitempty"`
	CPUUsec    uint64   `json:"cpu_usec"`
	MemoryPeak uint64   `json:"memory_peak_bytes"`
}

// FailedCommand is a command that failed more than once.
type FailedCommand struct {
	Command  string `json:"command"`
	Failures int    `json:"failures"`
	Runs     int    `json:"runs"`
}

// topRuns is how many runs each "costliest" list shows.
const topRuns = 5

func (m *Monitor) summary(_ context.Context, c *plugin.Call) (any, error) {
	var p sessionParams
	if err := rpc.DecodeParams(c.Params, &p); err != nil {
		return nil, err
	}
	if p.AgentID == "" {
		return nil, rpc.Errorf(rpc.CodeInvalidParams, "params.agent_id", "params.agent_id is required (and session_id for one session; leave it out for all of the agent's)")
	}
	sessions := []string{p.SessionID}
	if p.SessionID == "" {
		sessions = m.journal.sessions(p.AgentID)
	}
	var recs []Record
	var turns []workspace.Turn
	for _, s := range sessions {
		r, err := m.sessionRecords(sessionParams{p.AgentID, s})
		if err != nil {
			return nil, err
		}
		recs = append(recs, r...)
		t, _ := m.turns.Turns(p.AgentID, s)
		turns = append(turns, t...)
	}
	sum := Summarize(recs, turns)
	sum.AgentID, sum.SessionID, sum.Sessions = p.AgentID, p.SessionID, len(sessions)
	return sum, nil
}

// Summarize computes a summary of records and turns.
func Summarize(recs []Record, turns []workspace.Turn) Summary {
	s := Summary{Records: len(recs), Tools: []ToolSummary{}, Models: []ModelSummary{}, CostliestCPU: []RunSummary{}, CostliestMem: []RunSummary{}, FailedCommands: []FailedCommand{}}
	for _, t := range turns {
		s.Turns.Total++
		switch t.Outcome {
		case workspace.TurnSucceeded:
			s.Turns.Succeeded++
		case workspace.TurnFailed:
			s.Turns.Failed++
		default:
			s.Turns.Open++
		}
	}
	tools, toolDur := map[string]*ToolSummary{}, map[string][]float64{}
	models, modelDur := map[string]*ModelSummary{}, map[string][]float64{}
	var runs []RunSummary
	cmds := map[string]*FailedCommand{}
	for _, r := range recs {
		switch {
		case r.Kind == KindSpan && r.Category == CategoryTool:
			name := r.Tool
			if name == "" {
				name = r.Name
			}
			t := tools[name]
			if t == nil {
				t = &ToolSummary{Tool: name}
				tools[name] = t
			}
			t.Calls++
			t.TotalMS += r.DurationMS
			if r.Status == "error" {
				t.Failures++
			}
			toolDur[name] = append(toolDur[name], r.DurationMS)
		case r.Kind == KindSpan && r.Category == CategoryModel:
			name := r.Model
			if name == "" {
				name = r.Name
			}
			mm := models[name]
			if mm == nil {
				mm = &ModelSummary{Model: name}
				models[name] = mm
			}
			mm.Calls++
			mm.InputTokens += r.InputTokens
			mm.OutputTokens += r.OutputTokens
			if r.Status == "error" {
				mm.Errors++
			}
			modelDur[name] = append(modelDur[name], r.DurationMS)
		case r.Kind == KindRun:
			rs := RunSummary{SessionID: r.SessionID, RunID: r.RunID, Argv: r.Argv, TurnID: r.TurnID}
			if r.Usage != nil {
				rs.CPUUsec, rs.MemoryPeak = r.Usage.CPUUsec, r.Usage.MemoryPeak
			}
			runs = append(runs, rs)
			cmd := strings.Join(r.Argv, " ")
			fc := cmds[cmd]
			if fc == nil {
				fc = &FailedCommand{Command: cmd}
				cmds[cmd] = fc
			}
			fc.Runs++
			if r.Status == "error" {
				fc.Failures++
			}
		}
	}
	for _, name := range sortedKeys(tools) {
		t := tools[name]
		t.P50MS, t.P95MS = percentile(toolDur[name], 50), percentile(toolDur[name], 95)
		s.Tools = append(s.Tools, *t)
	}
	slices.SortStableFunc(s.Tools, func(a, b ToolSummary) int { return b.Calls - a.Calls })
	for _, name := range sortedKeys(models) {
		mm := models[name]
		mm.P50MS, mm.P95MS = percentile(modelDur[name], 50), percentile(modelDur[name], 95)
		s.Models = append(s.Models, *mm)
	}
	slices.SortStableFunc(s.Models, func(a, b ModelSummary) int { return b.Calls - a.Calls })
	byCPU := slices.Clone(runs)
	slices.SortStableFunc(byCPU, func(a, b RunSummary) int { return cmpDesc(a.CPUUsec, b.CPUUsec) })
	s.CostliestCPU = append(s.CostliestCPU, byCPU[:min(topRuns, len(byCPU))]...)
	byMem := slices.Clone(runs)
	slices.SortStableFunc(byMem, func(a, b RunSummary) int { return cmpDesc(a.MemoryPeak, b.MemoryPeak) })
	s.CostliestMem = append(s.CostliestMem, byMem[:min(topRuns, len(byMem))]...)
	for _, cmd := range sortedKeys(cmds) {
		if fc := cmds[cmd]; fc.Failures >= 2 {
			s.FailedCommands = append(s.FailedCommands, *fc)
		}
	}
	slices.SortStableFunc(s.FailedCommands, func(a, b FailedCommand) int { return b.Failures - a.Failures })
	return s
}

func cmpDesc(a, b uint64) int {
	switch {
	case a > b:
		return -1
	case a < b:
		return 1
	}
	return 0
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// percentile is the nearest-rank percentile p of xs (0 for none).
func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}
