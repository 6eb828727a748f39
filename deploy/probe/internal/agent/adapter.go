package agent

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/allox-os/allox/deploy/probe/internal/probe"
	"github.com/allox-os/allox/deploy/probe/internal/wire"
	"github.com/allox-os/allox/internal/rpc"
	"github.com/allox-os/allox/internal/term"
)

// Runner starts runs attached to the caller in the appliance (*rpc.Client).
type Runner interface {
	Exec(ctx context.Context, params any) (*rpc.Exec, error)
}

// Config is one adapter: a CLI on one session with one task.
type Config struct {
	Client                 Runner
	DevBox, Agent, Session string
	// IntentID is the task intent the adapter runs (on its events), "" when started directly.
	IntentID string
	// TraceID is the task intent's trace, on the adapter's events.
	TraceID string
	CLI     CLI
	Task    Task
	// Restart bounds the restarts after the CLI's run was killed mid-task (not a CLI that exits
	// by itself: that is its answer, done or failed). MaxAttempts restarts, Backoff doubled up
	// to MaxBackoff between them; one more kill escalates.
	Restart probe.HealPolicy
	// IdleAfter: a running CLI that shows nothing new for this long is idle.
	IdleAfter time.Duration
	// Poll is how often the screen is read for the status; default 200ms.
	Poll time.Duration
	// Emit sends Probe events (to the Gateway through the Probe's Event Emitter).
	Emit func(wire.Event)
	// Report hands an escalation to the Probe's self-heal loop (a class outside its allow-list:
	// the session is marked degraded and the Gateway decides).
	Report func(probe.Fault)
	// Approvals counts the permission requests of the session open on the dialog channel (the
	// Probe's Dialog Forwarder): while one is, the CLI waits for approval. nil: none are seen.
	Approvals func() int
	// Ask asks a permission prompt read off the CLI's screen (a CLI with Keys and Task.Dialog)
	// and returns "allow" or "deny"; nil: the dialog client in the session's sandbox
	// (askInSession), so the question takes the dialog channel's own path.
	Ask func(ctx context.Context, prompt string) (string, error)
	// Admit is asked before each restart: an error (the Probe lost the task's epoch, or fenced
	// the session) ends the adapter failed instead. nil: always admitted.
	Admit func() error
}

// FaultAdapterFailed is the fault an adapter reports once its restarts are spent.
const FaultAdapterFailed probe.FaultClass = "agent_adapter_failed"

// Adapter is one running adapter.
type Adapter struct {
	cfg  Config
	done chan struct{}

	mu       sync.Mutex
	status   string
	restarts int
	runs     []string // run ids, one per start
	screen   string   // the last screen read, for tests and the dialog's fallback
	reason   string   // why the status is what it is
	dialog   *screenDialog
}

// Start launches the adapter; it runs until the task is done or failed, or ctx ends.
func Start(ctx context.Context, cfg Config) *Adapter {
	if cfg.Poll == 0 {
		cfg.Poll = 200 * time.Millisecond
	}
	if cfg.IdleAfter == 0 {
		cfg.IdleAfter = 30 * time.Second
	}
	a := &Adapter{cfg: cfg, done: make(chan struct{})}
	go func() {
		defer close(a.done)
		a.run(ctx)
	}()
	return a
}

// Done is closed when the adapter has finished (done, failed, or its context ended).
func (a *Adapter) Done() <-chan struct{} { return a.done }

// State is the adapter's status, how often it was restarted, and its runs so far.
func (a *Adapter) State() (status string, restarts int, runs []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.status, a.restarts, append([]string(nil), a.runs...)
}

// Reason says why the status is what it is (the last reason given).
func (a *Adapter) Reason() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.reason
}

// Screen is the CLI's terminal screen as last read.
func (a *Adapter) Screen() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.screen
}

func (a *Adapter) run(ctx context.Context) {
	backoff := a.cfg.Restart.Backoff
	for {
		code, sig, err := a.once(ctx)
		if ctx.Err() != nil {
			return
		}
		switch {
		case err == nil && sig == "" && code == 0:
			a.set(wire.AgentDone, "exit 0")
			return
		case err == nil && sig == "":
			a.set(wire.AgentFailed, fmt.Sprintf("exit %d", code))
			return
		}
		why := fmt.Sprintf("run ended by %s mid-task", sig)
		if err != nil {
			why = err.Error()
		}
		a.mu.Lock()
		n := a.restarts
		a.mu.Unlock()
		if a.cfg.Admit != nil {
			if err := a.cfg.Admit(); err != nil {
				a.set(wire.AgentFailed, fmt.Sprintf("agent %s: %s; no restart: %v", a.cfg.CLI.Name, why, err))
				return
			}
		}
		if n >= a.cfg.Restart.MaxAttempts {
			reason := fmt.Sprintf("agent %s: %s after %d restarts: escalated to the gateway", a.cfg.CLI.Name, why, n)
			a.set(wire.AgentFailed, reason)
			a.event(wire.EventEscalation, "", reason)
			if a.cfg.Report != nil {
				a.cfg.Report(probe.Fault{Scope: a.cfg.DevBox + "/" + a.cfg.Session, Class: FaultAdapterFailed, Err: fmt.Errorf("%s", reason)})
			}
			return
		}
		reason := fmt.Sprintf("agent %s: %s; restart %d of %d in %v", a.cfg.CLI.Name, why, n+1, a.cfg.Restart.MaxAttempts, backoff)
		a.mu.Lock()
		a.reason = reason
		a.mu.Unlock()
		a.event(wire.EventFault, "", reason)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		a.mu.Lock()
		a.restarts++
		a.mu.Unlock()
		if backoff *= 2; backoff > a.cfg.Restart.MaxBackoff {
			backoff = a.cfg.Restart.MaxBackoff
		}
	}
}

// once starts the CLI on a terminal and follows its status until its run ends.
func (a *Adapter) once(ctx context.Context) (code int, sig string, err error) {
	c := a.cfg.CLI
	params := map[string]any{"agent_id": a.cfg.Agent, "session_id": a.cfg.Session, "argv": c.Argv(c.Binary, a.cfg.Task),
		"env": c.Env(a.cfg.Task), "terminal": rpc.ExecTerminal{Rows: 40, Cols: 120, Term: "xterm-256color"}}
	x, err := a.cfg.Client.Exec(ctx, params)
	if err != nil {
		return 0, "", fmt.Errorf("start %s: %w", c.Name, err)
	}
	go io.Copy(io.Discard, x.Stderr) // a terminal run has none
	t := term.Attach(term.Spec{Cols: 120, Rows: 40, RingBytes: 1 << 20, ScrollbackLines: 2000}, term.RunProcess(x), nil)
	a.mu.Lock()
	a.runs = append(a.runs, x.Run.RunID)
	a.mu.Unlock()
	a.set(wire.AgentWorking, "run "+x.Run.RunID+" started")
	stop := context.AfterFunc(ctx, func() { x.Close() })
	defer stop()
	code, sig = a.follow(ctx, t)
	return code, sig, nil
}

// screenDialog is the dialog of the prompts on the CLI's screen, nil when its approvals take
// another path (a structured hook) or none.
func (a *Adapter) screenDialog(t *term.Terminal) *screenDialog {
	c := a.cfg.CLI
	if !a.cfg.Task.Dialog || c.Keys == nil || c.Approval == nil {
		return nil
	}
	ask := a.cfg.Ask
	if ask == nil {
		ask = func(ctx context.Context, prompt string) (string, error) {
			return askInSession(ctx, a.cfg.Client, a.cfg.Agent, a.cfg.Session, c.Name, prompt)
		}
	}
	return &screenDialog{cli: c, ask: ask, send: func(b []byte) error { _, err := t.Write(b); return err },
		note: func(reason string) { a.mu.Lock(); a.reason = reason; a.mu.Unlock() }}
}

// follow reports the status of the CLI on t until it exits: its exit code and signal.
func (a *Adapter) follow(ctx context.Context, t *term.Terminal) (code int, sig string) {
	c := a.cfg.CLI
	dlg := a.screenDialog(t)
	ctx, cancel := context.WithCancel(ctx) // a question still open when the run ends is withdrawn
	defer cancel()
	a.mu.Lock()
	a.dialog = dlg
	a.mu.Unlock()
	tick := time.NewTicker(a.cfg.Poll)
	defer tick.Stop()
	last, lastChange := uint64(0), time.Now()
	quit := false
	for {
		select {
		case <-t.Done():
			a.readScreen(t)
			st := t.Status()
			return st.ExitCode, st.Signal
		case <-ctx.Done():
			return 0, ""
		case <-tick.C:
		}
		screen := a.readScreen(t)
		if end := t.Ring().End(); end != last {
			last, lastChange = end, time.Now()
		}
		onScreen := dlg != nil && dlg.step(ctx, screen)
		if !onScreen && !quit && c.TurnDone != nil && a.cfg.Task.Dialog && c.TurnDone.MatchString(screen) {
			quit = true // an interactive CLI's one task has ended: leave it, so its run ends
			go typeKeys(ctx, t, c.Quit)
		}
		switch {
		case a.cfg.Approvals != nil && a.cfg.Approvals() > 0:
			a.set(wire.AgentApproval, "a permission request is open on the dialog channel")
		case onScreen:
			a.set(wire.AgentApproval, dlg.reason())
		case c.Approval != nil && c.Approval.MatchString(screen):
			a.set(wire.AgentApproval, "a permission prompt is on the screen")
		case time.Since(lastChange) > a.cfg.IdleAfter:
			a.set(wire.AgentIdle, fmt.Sprintf("no output for %v", a.cfg.IdleAfter))
		default:
			a.set(wire.AgentWorking, "")
		}
	}
}

// typeKeys types each of keys on t, a moment apart (a TUI may read the next only after it has
// drawn what the last one opened).
func typeKeys(ctx context.Context, t *term.Terminal, keys [][]byte) {
	for _, k := range keys {
		select {
		case <-ctx.Done():
			return
		case <-time.After(500 * time.Millisecond):
		}
		t.Write(k)
	}
}

// ScreenPrompts is how many permission prompts read off the CLI's screen went to the dialog.
func (a *Adapter) ScreenPrompts() int {
	a.mu.Lock()
	d := a.dialog
	a.mu.Unlock()
	if d == nil {
		return 0
	}
	return d.Asked()
}

func (a *Adapter) readScreen(t *term.Terminal) string {
	s := t.Screen().Snapshot().Render()
	a.mu.Lock()
	a.screen = s
	a.mu.Unlock()
	return s
}

// set records the status and reports a change.
func (a *Adapter) set(status, reason string) {
	a.mu.Lock()
	changed := a.status != status
	a.status = status
	if reason != "" {
		a.reason = reason
	}
	n := a.restarts
	a.mu.Unlock()
	if changed {
		a.event(wire.EventAgentStatus, status, fmt.Sprintf("agent %s %s (restarts %d)%s", a.cfg.CLI.Name, status, n, prefixed(reason)))
	}
}

func prefixed(s string) string {
	if s == "" {
		return ""
	}
	return ": " + s
}

func (a *Adapter) event(kind, phase, reason string) {
	if a.cfg.Emit != nil {
		a.cfg.Emit(wire.Event{Kind: kind, IntentID: a.cfg.IntentID, TraceID: a.cfg.TraceID, DevBox: a.cfg.DevBox, Session: a.cfg.Session, Phase: phase, Reason: reason, At: time.Now()})
	}
}
