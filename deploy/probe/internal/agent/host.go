package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/allox-os/allox/deploy/probe/internal/probe"
	"github.com/allox-os/allox/deploy/probe/internal/wire"
	"github.com/allox-os/allox/internal/rpc"
)

// Host is the Probe's Adapter Host (probe.Tasker): it starts one adapter per task intent, once
// per intent id, at most one running per session, each with its own run, counters and backoff.
type Host struct {
	// Prompt fetches a task intent's prompt from the Gateway replicas (wire.TaskClient.Prompt):
	// the intent carries none.
	Prompt func(ctx context.Context, epoch int64, intentID string) (string, error)
	// Keys is the directory of the API keys tasks name by reference (a file per key, mode 0600
	// or stricter); "" when the Probe holds none.
	Keys string
	// Approvals counts a session's open dialog questions (the Dialog Forwarder's Open); nil
	// without the dialog channel.
	Approvals func(devbox, agent, session string) int
	// IdleAfter and Poll are the adapters' (see Config); 0 takes their defaults.
	IdleAfter, Poll time.Duration

	mu        sync.Mutex
	byIntent  map[string]*Adapter
	bySession map[string]*Adapter // devbox/session → its last adapter
	starting  map[string]bool     // intent ids being started
}

var keyRefRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// ErrSessionBusy refuses a task for a session whose adapter still runs another.
var ErrSessionBusy = errors.New("the session's agent runs another task")

// Adapter returns the adapter of a task intent.
func (h *Host) Adapter(intentID string) (*Adapter, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	a, ok := h.byIntent[intentID]
	return a, ok
}

// StartTask starts t's adapter, or returns what the first start of the same intent returned.
func (h *Host) StartTask(ctx context.Context, t probe.TaskStart) (json.RawMessage, error) {
	scope := t.DevBox + "/" + t.Session
	h.mu.Lock()
	if h.byIntent == nil {
		h.byIntent, h.bySession, h.starting = map[string]*Adapter{}, map[string]*Adapter{}, map[string]bool{}
	}
	if a := h.byIntent[t.IntentID]; a != nil {
		h.mu.Unlock()
		return started(t, a)
	}
	if h.starting[t.IntentID] {
		h.mu.Unlock()
		return nil, fmt.Errorf("task %s is being started", t.IntentID)
	}
	if a := h.bySession[scope]; a != nil && !isDone(a) {
		h.mu.Unlock()
		return nil, fmt.Errorf("session %s: %w (%s): send the task when it has ended", scope, ErrSessionBusy, a.cfg.IntentID)
	}
	h.starting[t.IntentID] = true
	h.mu.Unlock()
	defer func() { h.mu.Lock(); delete(h.starting, t.IntentID); h.mu.Unlock() }()

	cfg, err := h.config(ctx, t)
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	if a := h.bySession[scope]; a != nil && !isDone(a) { // another intent started meanwhile
		h.mu.Unlock()
		return nil, fmt.Errorf("session %s: %w (%s): send the task when it has ended", scope, ErrSessionBusy, a.cfg.IntentID)
	}
	a := Start(ctx, cfg)
	h.byIntent[t.IntentID], h.bySession[scope] = a, a
	h.mu.Unlock()
	return started(t, a)
}

// config is the adapter's configuration: the CLI, the prompt from the Gateway, the key by its
// reference, the sandbox's client.
func (h *Host) config(ctx context.Context, t probe.TaskStart) (Config, error) {
	cli, err := Lookup(t.Task.CLI)
	if err != nil {
		return Config{}, err
	}
	key, err := h.key(t.Task.APIKeyRef)
	if err != nil {
		return Config{}, err
	}
	if h.Prompt == nil {
		return Config{}, errors.New("this probe fetches no task prompts")
	}
	fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	prompt, err := h.Prompt(fctx, t.Epoch, t.IntentID)
	cancel()
	if err != nil {
		return Config{}, fmt.Errorf("task %s: its prompt: %w", t.IntentID, err)
	}
	cfg := Config{Client: rpc.NewClient(t.Sandbox.Endpoint(), t.Sandbox.Token(), &http.Client{Transport: &http.Transport{Proxy: nil}}),
		DevBox: t.DevBox, Agent: t.Agent, Session: t.Session, IntentID: t.IntentID, TraceID: t.TraceID, CLI: cli,
		Task:    Task{Prompt: prompt, ModelURL: t.Task.ModelURL, APIKey: key, Model: t.Task.Model, Dialog: t.Task.Approval == wire.ApprovalDialog},
		Restart: t.Restart, IdleAfter: h.IdleAfter, Poll: h.Poll, Emit: t.Emit, Report: t.Report, Admit: t.Admit}
	if h.Approvals != nil {
		cfg.Approvals = func() int { return h.Approvals(t.DevBox, t.Agent, t.Session) }
	}
	return cfg, nil
}

// key reads the API key named ref from the key directory. Errors name the reference, never the
// value.
func (h *Host) key(ref string) (string, error) {
	if ref == "" {
		return "", nil
	}
	switch {
	case !keyRefRE.MatchString(ref):
		return "", fmt.Errorf("api_key_ref %q: not a key name (1-63 of A-Z, a-z, 0-9, '.', '_', '-')", ref)
	case h.Keys == "":
		return "", fmt.Errorf("api_key_ref %q: this probe holds no keys (probe serve --agent-keys DIR, a file per key)", ref)
	}
	p := filepath.Join(h.Keys, ref)
	st, err := os.Stat(p)
	if err != nil {
		return "", fmt.Errorf("api_key_ref %q: no key file %s in --agent-keys: %w", ref, p, errors.Unwrap(err))
	}
	if st.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("api_key_ref %q: %s has mode %v: make it readable by the Probe alone (chmod 600)", ref, p, st.Mode().Perm())
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return "", fmt.Errorf("api_key_ref %q: read %s: %w", ref, p, errors.Unwrap(err))
	}
	return strings.TrimSpace(string(b)), nil
}

func isDone(a *Adapter) bool {
	select {
	case <-a.Done():
		return true
	default:
		return false
	}
}

// started is the task intent's result: which adapter runs it (metadata).
func started(t probe.TaskStart, a *Adapter) (json.RawMessage, error) {
	return json.Marshal(map[string]string{"intent": t.IntentID, "cli": a.cfg.CLI.Name, "session": t.Session})
}
