package gateway

import (
	"context"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/allox-os/allox/deploy/probe/internal/audit"
	"github.com/allox-os/allox/deploy/probe/internal/wire"
)

// Agent tasks. The intent (etcd) and the audit carry the task's metadata (wire.TaskSpec); the
// prompt is content and lives in this replica's memory only (taskHub), from the task's request
// until its Probe reports the intent done or taskHeld passes. A Probe fetches it from the
// replicas in turn (wire.TaskClient); if the replica that took it is gone, the intent fails on
// the Probe with that reason and the task must be sent again. The API key is never here: the
// task names a key the Probe holds.

// taskHeld bounds how long a prompt waits in memory for its Probe.
const taskHeld = 15 * time.Minute

// maxTasksHeld bounds the prompts held by one replica.
const maxTasksHeld = 1024

var keyRefRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

type taskHub struct {
	mu    sync.Mutex
	held  map[string]heldTask // intent id → prompt
	clock func() time.Time
}

type heldTask struct {
	host, prompt string
	until        time.Time
}

func (h *taskHub) now() time.Time {
	if h.clock != nil {
		return h.clock()
	}
	return time.Now()
}

// hold keeps prompt for intent id of host; false when the replica holds too many.
func (h *taskHub) hold(id, host, prompt string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.held == nil {
		h.held = map[string]heldTask{}
	}
	now := h.now()
	for k, t := range h.held {
		if now.After(t.until) {
			delete(h.held, k)
		}
	}
	if len(h.held) >= maxTasksHeld {
		return false
	}
	h.held[id] = heldTask{host: host, prompt: prompt, until: now.Add(taskHeld)}
	return true
}

func (h *taskHub) get(id string) (heldTask, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	t, ok := h.held[id]
	if ok && h.now().After(t.until) {
		delete(h.held, id)
		return heldTask{}, false
	}
	return t, ok
}

func (h *taskHub) drop(id string) {
	h.mu.Lock()
	delete(h.held, id)
	h.mu.Unlock()
}

// Task turns an operator's task into a task intent for the session's host under the placement's
// epoch. It returns the intent id.
func (g *Gateway) Task(ctx context.Context, actor string, req wire.TaskRequest, traceID string) (string, error) {
	ts, err := checkTask(&req)
	if err != nil {
		return "", err
	}
	st, err := g.Get(ctx, req.DevBox)
	if err != nil {
		return "", err
	}
	if !hasSession(st.Spec, req.Session) {
		return "", fmt.Errorf("%w: session %q is not a session of devbox %q; name one of its spec's sessions", ErrInvalid, req.Session, req.DevBox)
	}
	p := st.Placement
	if p == nil || p.Stopping {
		return "", fmt.Errorf("%w: devbox %q is not placed on a host (is it running? see `gateway get %s`)", ErrConflict, req.DevBox, req.DevBox)
	}
	id := "task-" + randomID()
	in := wire.Intent{ID: id, Host: p.Host, Epoch: p.Epoch, Kind: wire.IntentTask, DevBox: req.DevBox, Session: req.Session,
		Task: &ts, TraceID: traceID, Issued: time.Now().UTC()}
	if !g.tasks.hold(id, p.Host, req.Prompt) { // before the intent exists: its Probe may ask at once
		return "", fmt.Errorf("%w: this replica holds %d tasks not yet fetched by their Probes; retry later", ErrConflict, maxTasksHeld)
	}
	reason := fmt.Sprintf("cli %s, approval %s, prompt %d bytes", ts.CLI, ts.Approval, ts.PromptBytes)
	if req.Reason != "" {
		reason = req.Reason + "; " + reason
	}
	_, err = g.commit(ctx, []clientv3.Cmp{
		clientv3.Compare(clientv3.ModRevision(leaseKey(p.Host)), "=", p.Epoch),
		clientv3.Compare(clientv3.Value(prefixPlacement+req.DevBox), "=", mustJSON(*p)),
	}, putJSON(intentPrefix(p.Host)+id, in),
		auditOp(audit.Record{Actor: actor, Action: wire.IntentTask, Object: "session/" + req.DevBox + "/" + req.Session,
			Reason: reason, TraceID: traceID, Epoch: p.Epoch, Host: p.Host}))
	if err != nil {
		g.tasks.drop(id)
		return "", err
	}
	return id, nil
}

// checkTask validates a task request, filling in its defaults, and returns its metadata.
func checkTask(req *wire.TaskRequest) (wire.TaskSpec, error) {
	if req.Approval == "" {
		req.Approval = wire.ApprovalDialog
	}
	switch {
	case req.DevBox == "" || req.Session == "":
		return wire.TaskSpec{}, fmt.Errorf("%w: devbox and session: name the session the task is for", ErrInvalid)
	case !slices.Contains(wire.AgentCLIs, req.CLI):
		return wire.TaskSpec{}, fmt.Errorf("%w: cli %q: use one of %s", ErrInvalid, req.CLI, strings.Join(wire.AgentCLIs, ", "))
	case strings.TrimSpace(req.Prompt) == "":
		return wire.TaskSpec{}, fmt.Errorf("%w: prompt is empty: give the task's text (gateway task reads it from stdin with -)", ErrInvalid)
	case len(req.Prompt) > wire.MaxPrompt:
		return wire.TaskSpec{}, fmt.Errorf("%w: prompt is %d bytes; at most %d", ErrInvalid, len(req.Prompt), wire.MaxPrompt)
	case req.APIKeyRef != "" && !keyRefRE.MatchString(req.APIKeyRef):
		return wire.TaskSpec{}, fmt.Errorf("%w: api_key_ref %q: name a key file of the Probe's --agent-keys directory (1-63 of A-Z, a-z, 0-9, '.', '_', '-'), never the key itself", ErrInvalid, req.APIKeyRef)
	case req.Approval != wire.ApprovalDialog && req.Approval != wire.ApprovalNone:
		return wire.TaskSpec{}, fmt.Errorf("%w: approval %q: use %s or %s", ErrInvalid, req.Approval, wire.ApprovalDialog, wire.ApprovalNone)
	}
	if req.ModelURL != "" {
		u, err := url.Parse(req.ModelURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
			return wire.TaskSpec{}, fmt.Errorf("%w: model_url %q: use an http:// or https:// URL as the sandbox reaches it, with no credentials, e.g. http://10.0.2.100:8080", ErrInvalid, req.ModelURL)
		}
	}
	return wire.TaskSpec{CLI: req.CLI, ModelURL: req.ModelURL, Model: req.Model, APIKeyRef: req.APIKeyRef, Approval: req.Approval,
		PromptBytes: len(req.Prompt)}, nil
}

// TaskPrompt hands a task intent's prompt to the Probe it is for, under the epoch it holds now.
func (g *Gateway) TaskPrompt(ctx context.Context, host string, req wire.TaskContentRequest) (wire.TaskContent, error) {
	if _, err := g.current(ctx, host, req.Epoch); err != nil {
		return wire.TaskContent{}, err
	}
	var in wire.Intent
	rev, err := g.getJSON(ctx, intentPrefix(host)+req.IntentID, &in)
	if err != nil {
		return wire.TaskContent{}, err
	}
	if rev == 0 || in.Kind != wire.IntentTask || in.Epoch != req.Epoch {
		return wire.TaskContent{}, fmt.Errorf("%w: task intent %q is not pending for host %s under epoch %d", ErrNotFound, req.IntentID, host, req.Epoch)
	}
	t, ok := g.tasks.get(req.IntentID)
	if !ok || t.host != host {
		return wire.TaskContent{}, fmt.Errorf("%w: task %q: this replica does not hold its prompt (another replica took it, or it was lost: send the task again)", ErrNotFound, req.IntentID)
	}
	return wire.TaskContent{Prompt: t.prompt}, nil
}
