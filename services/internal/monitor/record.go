package monitor

import (
	"time"

	"github.com/allox-os/allox/internal/cgroup"
)

// Record kinds: one line of a session's journal each.
const (
	KindSpan   = "span"   // a span: from OTLP traces or monitor.span
	KindEvent  = "event"  // an event: an OTLP log record, a span event or monitor.event
	KindMetric = "metric" // a data point: from OTLP metrics or monitor.metric
	KindRun    = "run"    // a sandboxed run: process.start to its end, with its resource use
)

// Span categories, from the OpenTelemetry GenAI semantic conventions (gen_ai.operation.name).
const (
	CategoryModel = "model" // chat, text_completion, generate_content, embeddings
	CategoryTool  = "tool"  // execute_tool
	CategoryAgent = "agent" // create_agent, invoke_agent
	CategoryOther = "span"
)

// Sources of a record.
const (
	SourceOTLP   = "otlp"   // the session's OTLP receiver
	SourceAPI    = "api"    // monitor.span, monitor.event, monitor.metric (allox monitor)
	SourceDaemon = "daemon" // the daemon's own: runs
)

// Record is one line of a session's journal. The session is where the record arrived (its
// receiver, its socket), never what the sender claims; the turn is the session's turn that was
// open when the span started (or the allox.turn_id attribute the sender set).
type Record struct {
	Kind      string    `json:"kind"`
	Source    string    `json:"source"`
	Received  time.Time `json:"received"`
	AgentID   string    `json:"agent_id"`
	SessionID string    `json:"session_id"`
	TurnID    string    `json:"turn_id,omitempty"`

	TraceID      string `json:"trace_id,omitempty"`
	SpanID       string `json:"span_id,omitempty"`
	ParentSpanID string `json:"parent_span_id,omitempty"`
	Name         string `json:"name,omitempty"`
	Category     string `json:"category,omitempty"`
	Service      string `json:"service,omitempty"` // the resource's service.name

	Start      time.Time `json:"start,omitzero"`
	End        time.Time `json:"end,omitzero"`
	DurationMS float64   `json:"duration_ms,omitempty"`
	// Status is "ok", "error" or "" (unset); Error the status message or error.type.
	Status string `json:"status,omitempty"`
	Error  string `json:"error,omitempty"`

	// GenAI semantic conventions: the model call's model, tokens; a tool call's tool.
	Model        string `json:"model,omitempty"`
	InputTokens  int64  `json:"input_tokens,omitempty"`
	OutputTokens int64  `json:"output_tokens,omitempty"`
	Tool         string `json:"tool,omitempty"`

	// Metric data points: the value (a sum, gauge or histogram's sum) and, for a histogram, count.
	Value *float64 `json:"value,omitempty"`
	Count uint64   `json:"count,omitempty"`
	Unit  string   `json:"unit,omitempty"`

	// Runs: the run, its command, how it ended and what its cgroup used.
	RunID    string        `json:"run_id,omitempty"`
	Argv     []string      `json:"argv,omitempty"`
	ExitCode *int          `json:"exit_code,omitempty"`
	Usage    *cgroup.Usage `json:"usage,omitempty"`
	// Link says how a run's span was found: "traceparent" (process.start's param), "env" (the
	// run's TRACEPARENT), "turn" (the open turn, no span) or "" (none).
	Link string `json:"link,omitempty"`

	Attrs map[string]any `json:"attributes,omitempty"`
}
