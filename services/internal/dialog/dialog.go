// Package dialog is the appliance's half of the Probe's dialog channel (plugin "dialog"):
// forward-only delivery of the prompts an agent raises — permission requests, questions — up to
// whoever answers for the session (the Gateway, a person or a policy, through the Probe), and of
// the answers down, with request ids and a default taken on timeout.
//
// An agent asks on its session's own socket (dialog.ask, `allox dialog ask`, or an agent's
// structured permission hook: Claude Code's PreToolUse, `allox dialog hook claude-code`, or
// codex's PermissionRequest, `allox dialog hook codex`);
// the call blocks until the answer, the timeout (the question's default) or the caller going
// away. The host side, on the authenticated host listener only, waits for questions
// (dialog.pending) and answers them (dialog.answer). A question's text and its answer exist only
// in memory while it is open and on their way; what is kept, under the plugin's state outside
// every workspace, is metadata alone — ids, times, sizes, the number of options, the outcome and
// who answered (dialog.jsonl, bounded). When nothing answers, the default is "ask" for a hook: the
// agent falls back to its own in-terminal prompt.
package dialog

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/allox-os/allox/internal/rpc"
	"github.com/allox-os/allox/services/internal/plugin"
)

// Version is the plugin's version.
const Version = "1.0.0"

// Actions.
const (
	ActionAsk     = "dialog.ask"     // session socket: ask and wait for the answer
	ActionPending = "dialog.pending" // host listener: the open questions (waits for one with params.wait)
	ActionAnswer  = "dialog.answer"  // host listener: answer one
)

// Kinds of question.
const (
	KindPermission = "permission"
	KindQuestion   = "question"
)

// Outcomes.
const (
	Answered  = "answered"
	TimedOut  = "timeout"   // the default was taken
	Cancelled = "cancelled" // the asking run went away
)

// Bounds.
const (
	DefaultTimeout = 5 * time.Minute
	MaxTimeout     = time.Hour
	MaxPrompt      = 16 << 10
	MaxOptions     = 16
	MaxOpen        = 64      // open questions per session
	MaxPendingWait = 60.0    // seconds dialog.pending may wait
	logBound       = 4 << 20 // bytes of metadata before the log is rotated once
)

// Question is what an agent asks.
type Question struct {
	Kind    string   `json:"kind"`
	Prompt  string   `json:"prompt"`
	Options []string `json:"options,omitempty"`
	// Default is the answer on timeout; it must be one of Options.
	Default string `json:"default"`
	// Timeout in seconds (0: DefaultTimeout).
	Timeout float64 `json:"timeout,omitempty"`
	// Source names what asked, e.g. "claude-code PreToolUse" (metadata).
	Source string `json:"source,omitempty"`
}

// Request is an open question as the host side sees it: delivered, never stored.
type Request struct {
	RequestID string    `json:"request_id"`
	AgentID   string    `json:"agent_id"`
	SessionID string    `json:"session_id"`
	RunID     string    `json:"run_id,omitempty"`
	Asked     time.Time `json:"asked"`
	Deadline  time.Time `json:"deadline"`
	Question
}

// Answer is how a question ended.
type Answer struct {
	RequestID string `json:"request_id"`
	Choice    string `json:"choice"`
	Outcome   string `json:"outcome"`
	By        string `json:"by,omitempty"`
}

// record is one line of the metadata log: nothing of the question's or the answer's content.
type record struct {
	RequestID   string    `json:"request_id"`
	AgentID     string    `json:"agent_id"`
	SessionID   string    `json:"session_id"`
	RunID       string    `json:"run_id,omitempty"`
	Kind        string    `json:"kind"`
	Source      string    `json:"source,omitempty"`
	Asked       time.Time `json:"asked"`
	Ended       time.Time `json:"ended"`
	PromptBytes int       `json:"prompt_bytes"`
	Options     int       `json:"options"`
	AnswerBytes int       `json:"answer_bytes"`
	Outcome     string    `json:"outcome"`
	By          string    `json:"by,omitempty"`
}

// RunOf names the run of agent/session that a process (the session socket's peer) belongs to,
// "" when unknown.
type RunOf func(agent, session string, pid int) string

// Broker holds the open questions.
type Broker struct {
	log   string // the metadata log
	runOf RunOf
	slog  *slog.Logger

	mu      sync.Mutex
	open    map[string]*pending
	changed chan struct{} // closed and replaced when a question opens or ends
	gen     int64         // counts openings and endings: dialog.pending's since
	ended   []Ended       // the last maxEnded endings, oldest first
	logMu   sync.Mutex
}

// Ended is how a question ended, for the host side's watcher: metadata only.
type Ended struct {
	Generation  int64     `json:"generation"`
	RequestID   string    `json:"request_id"`
	AgentID     string    `json:"agent_id"`
	SessionID   string    `json:"session_id"`
	Outcome     string    `json:"outcome"`
	By          string    `json:"by,omitempty"`
	AnswerBytes int       `json:"answer_bytes"`
	At          time.Time `json:"at"`
}

// maxEnded bounds the endings dialog.pending reports.
const maxEnded = 256

type pending struct {
	req  Request
	done chan Answer // buffered 1: the one answer
}

// New opens the plugin with its state in the plugin's state directory.
func New(_ context.Context, core plugin.Core) (*plugin.Contribution, error) {
	if err := os.MkdirAll(core.State, 0o700); err != nil {
		return nil, fmt.Errorf("dialog: %w", err)
	}
	b := &Broker{log: filepath.Join(core.State, "dialog.jsonl"), slog: core.Log, open: map[string]*pending{}, changed: make(chan struct{})}
	if b.slog == nil {
		b.slog = slog.New(slog.DiscardHandler)
	}
	if core.Workspace != nil {
		b.runOf = core.Workspace.RunOfPID
	}
	return &plugin.Contribution{Actions: map[string]plugin.Action{
		ActionAsk:     {Handler: b.ask, Scope: plugin.ScopeSession},
		ActionPending: {Handler: b.pending, Scope: plugin.ScopeHost, ReadOnly: true},
		ActionAnswer:  {Handler: b.answer, Scope: plugin.ScopeHost},
	}}, nil
}

func field(name, format string, args ...any) error {
	return rpc.Errorf(rpc.CodeInvalidParams, "params."+name, "params.%s: "+format, append([]any{name}, args...)...)
}

// check validates a question and fills its defaults.
func (q *Question) check() (time.Duration, error) {
	switch q.Kind {
	case KindPermission:
		if len(q.Options) == 0 {
			q.Options = []string{"allow", "deny"}
		}
	case KindQuestion:
	default:
		return 0, field("kind", "%q: use %q or %q", q.Kind, KindPermission, KindQuestion)
	}
	if q.Prompt == "" || len(q.Prompt) > MaxPrompt {
		return 0, field("prompt", "give the text to show, at most %d bytes (it has %d)", MaxPrompt, len(q.Prompt))
	}
	if len(q.Options) > MaxOptions {
		return 0, field("options", "%d options: at most %d", len(q.Options), MaxOptions)
	}
	for i, o := range q.Options {
		if o == "" || slices.Index(q.Options, o) != i {
			return 0, field("options", "option %d (%q) is empty or given twice", i, o)
		}
	}
	if len(q.Options) > 0 && !slices.Contains(q.Options, q.Default) {
		return 0, field("default", "%q is not one of the options %q: the default is what a timeout answers", q.Default, q.Options)
	}
	if len(q.Options) == 0 && q.Default == "" {
		return 0, field("default", "a question without options needs the answer a timeout gives")
	}
	t := time.Duration(q.Timeout * float64(time.Second))
	switch {
	case q.Timeout < 0 || t > MaxTimeout:
		return 0, field("timeout", "%g s: use 0 (for %s) to %.0f seconds", q.Timeout, DefaultTimeout, MaxTimeout.Seconds())
	case t == 0:
		t = DefaultTimeout
	}
	return t, nil
}

func newID() string {
	var b [8]byte
	rand.Read(b[:])
	return "q-" + hex.EncodeToString(b[:])
}

func (b *Broker) ask(ctx context.Context, c *plugin.Call) (any, error) {
	var p struct {
		AgentID   string `json:"agent_id"`
		SessionID string `json:"session_id"`
		Question
	}
	if err := rpc.DecodeParams(c.Params, &p); err != nil {
		return nil, err
	}
	timeout, err := p.Question.check()
	if err != nil {
		return nil, err
	}
	now := time.Now().UTC()
	pd := &pending{done: make(chan Answer, 1), req: Request{RequestID: newID(), AgentID: p.AgentID, SessionID: p.SessionID,
		Asked: now, Deadline: now.Add(timeout), Question: p.Question}}
	if b.runOf != nil && c.PeerPID > 0 {
		pd.req.RunID = b.runOf(p.AgentID, p.SessionID, c.PeerPID)
	}
	b.mu.Lock()
	n := 0
	for _, o := range b.open {
		if o.req.AgentID == p.AgentID && o.req.SessionID == p.SessionID {
			n++
		}
	}
	if n >= MaxOpen {
		b.mu.Unlock()
		return nil, rpc.Errorf(rpc.CodeConflict, "", "the session has %d open questions, the most it may: wait for an answer", n)
	}
	b.open[pd.req.RequestID] = pd
	b.bump()
	b.mu.Unlock()

	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var a Answer
	select {
	case a = <-pd.done:
	case <-timer.C:
		a = b.resolve(pd.req.RequestID, Answer{Choice: pd.req.Default, Outcome: TimedOut})
	case <-ctx.Done():
		a = b.resolve(pd.req.RequestID, Answer{Outcome: Cancelled})
	}
	return a, nil
}

// resolve ends an open question with a (unless it has ended already: then that answer) and logs
// its metadata.
func (b *Broker) resolve(id string, a Answer) Answer {
	b.mu.Lock()
	pd, ok := b.open[id]
	if ok {
		delete(b.open, id)
		b.bump()
		b.ended = append(b.ended, Ended{Generation: b.gen, RequestID: id, AgentID: pd.req.AgentID, SessionID: pd.req.SessionID,
			Outcome: a.Outcome, By: a.By, AnswerBytes: len(a.Choice), At: time.Now().UTC()})
		if len(b.ended) > maxEnded {
			b.ended = b.ended[len(b.ended)-maxEnded:]
		}
	}
	b.mu.Unlock()
	if !ok {
		return Answer{}
	}
	a.RequestID = id
	pd.done <- a
	b.record(pd.req, a)
	return a
}

// bump wakes the waiters of dialog.pending; the caller holds mu.
func (b *Broker) bump() {
	b.gen++
	close(b.changed)
	b.changed = make(chan struct{})
}

func (b *Broker) record(r Request, a Answer) {
	line, _ := json.Marshal(record{RequestID: r.RequestID, AgentID: r.AgentID, SessionID: r.SessionID, RunID: r.RunID,
		Kind: r.Kind, Source: r.Source, Asked: r.Asked, Ended: time.Now().UTC(), PromptBytes: len(r.Prompt), Options: len(r.Options),
		AnswerBytes: len(a.Choice), Outcome: a.Outcome, By: a.By})
	b.logMu.Lock()
	defer b.logMu.Unlock()
	if fi, err := os.Stat(b.log); err == nil && fi.Size() > logBound {
		if err := os.Rename(b.log, b.log+".1"); err != nil {
			b.slog.Warn("dialog log rotation failed", "error", err.Error())
		}
	}
	f, err := os.OpenFile(b.log, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err == nil {
		_, err = f.Write(append(line, '\n'))
		err = errors.Join(err, f.Sync(), f.Close())
	}
	if err != nil {
		b.slog.Warn("dialog metadata not recorded", "request_id", r.RequestID, "error", err.Error())
	}
}

// pending answers the open questions. Without since, it waits (up to wait) for one to be open;
// with since (a generation an earlier reply gave), it waits until something opened or ended after
// it, and the reply also holds the endings after it: what a watcher such as the Probe needs to
// forward questions and their outcomes. now is the appliance's clock, for the caller to place the
// deadlines on its own.
func (b *Broker) pending(ctx context.Context, c *plugin.Call) (any, error) {
	var p struct {
		Wait  float64 `json:"wait"` // seconds to wait for a question when none is open
		Since *int64  `json:"since"`
	}
	if err := rpc.DecodeParams(c.Params, &p); err != nil {
		return nil, err
	}
	if p.Wait < 0 || p.Wait > MaxPendingWait {
		return nil, field("wait", "%g s: use 0 to %.0f", p.Wait, MaxPendingWait)
	}
	if p.Since != nil && *p.Since < 0 {
		return nil, field("since", "%d: use a generation an earlier reply gave (0 at first)", *p.Since)
	}
	deadline := time.After(time.Duration(p.Wait * float64(time.Second)))
	for {
		b.mu.Lock()
		out := make([]Request, 0, len(b.open))
		for _, pd := range b.open {
			out = append(out, pd.req)
		}
		gen, changed := b.gen, b.changed
		var ended []Ended
		if p.Since != nil {
			for _, e := range b.ended {
				if e.Generation > *p.Since {
					ended = append(ended, e)
				}
			}
		}
		b.mu.Unlock()
		ready := len(out) > 0
		if p.Since != nil {
			ready = gen != *p.Since
		}
		if ready || p.Wait == 0 {
			slices.SortFunc(out, func(x, y Request) int { return x.Asked.Compare(y.Asked) })
			return map[string]any{"requests": out, "ended": ended, "generation": gen, "now": time.Now().UTC()}, nil
		}
		select {
		case <-changed:
		case <-deadline:
			return map[string]any{"requests": out, "ended": ended, "generation": gen, "now": time.Now().UTC()}, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (b *Broker) answer(_ context.Context, c *plugin.Call) (any, error) {
	var p struct {
		RequestID string `json:"request_id"`
		Choice    string `json:"choice"`
		By        string `json:"by"`
	}
	if err := rpc.DecodeParams(c.Params, &p); err != nil {
		return nil, err
	}
	if p.By == "" {
		return nil, field("by", "name who answers (a person, or the policy that decided), for the record")
	}
	b.mu.Lock()
	pd, ok := b.open[p.RequestID]
	b.mu.Unlock()
	if !ok {
		return nil, rpc.Errorf(rpc.CodeNotFound, "params.request_id", "no open question %q: it was answered, timed out or cancelled, or never asked (dialog.pending lists the open ones)", p.RequestID)
	}
	if len(pd.req.Options) > 0 && !slices.Contains(pd.req.Options, p.Choice) {
		return nil, &rpc.Error{Code: rpc.CodeInvalidParams, Field: "params.choice", Choices: pd.req.Options,
			Message: fmt.Sprintf("params.choice %q is not one of the question's options %q", p.Choice, pd.req.Options)}
	}
	if p.Choice == "" {
		return nil, field("choice", "give the answer")
	}
	a := b.resolve(p.RequestID, Answer{Choice: p.Choice, Outcome: Answered, By: p.By})
	if a.RequestID == "" {
		return nil, rpc.Errorf(rpc.CodeNotFound, "params.request_id", "question %q ended while it was being answered", p.RequestID)
	}
	return a, nil
}
