package wire

import (
	"context"
	"crypto/tls"
	"errors"
	"net/http"
	"time"
)

// Agent tasks: a person (or tooling) sends a task to a session's agent CLI with `gateway task`;
// the Gateway turns it into a task intent for the DevBox's host under the placement's epoch, and
// the Probe's Adapter Host starts the CLI's adapter on it. The intent, the store and the audit
// carry metadata only (the CLI, the model endpoint and name, the API key's reference, the
// prompt's size): the prompt is content, held in the memory of the replica that took the task
// until the Probe fetches it (PathProbeTask), never in etcd. The API key's value is never in the
// Gateway at all: the task names a key the Probe holds (probe serve --agent-keys DIR).
const (
	// PathTasks takes a task (admin).
	PathTasks = "/v1/tasks"
	// PathProbeTask is where a Probe fetches a task intent's prompt (probe certificate).
	PathProbeTask = "/v1/probe/task"
)

// IntentTask starts an agent adapter on a session with a task.
const IntentTask = "task"

// AgentCLIs are the agents' CLIs an adapter runs.
var AgentCLIs = []string{"codex", "claude_code", "opencode"}

// Approval modes of a task.
const (
	// ApprovalDialog: the CLI's permission requests go through the dialog channel (Claude Code's
	// PreToolUse hook asks `allox dialog hook claude-code`, codex's PermissionRequest hook `allox
	// dialog hook codex` (a prompt codex shows anyway is read off its screen, asked with `allox
	// dialog ask` and answered with keys), opencode's plugin's tool.execute.before hook `allox
	// dialog hook opencode`; nobody answering denies).
	ApprovalDialog = "dialog"
	// ApprovalNone: the CLI asks nothing (its own approvals off; the session's sandbox is the
	// boundary).
	ApprovalNone = "none"
)

// MaxPrompt bounds a task's prompt.
const MaxPrompt = 64 << 10

// TaskSpec is a task intent's metadata: everything but the prompt.
type TaskSpec struct {
	CLI         string `json:"cli"`
	ModelURL    string `json:"model_url,omitempty"`
	Model       string `json:"model,omitempty"`
	APIKeyRef   string `json:"api_key_ref,omitempty"`
	Approval    string `json:"approval"`
	PromptBytes int    `json:"prompt_bytes"`
}

// TaskRequest is an operator's task for one session.
type TaskRequest struct {
	DevBox    string `json:"devbox"`
	Session   string `json:"session"`
	CLI       string `json:"cli"`
	Prompt    string `json:"prompt"`
	ModelURL  string `json:"model_url,omitempty"`
	Model     string `json:"model,omitempty"`
	APIKeyRef string `json:"api_key_ref,omitempty"`
	Approval  string `json:"approval,omitempty"` // ApprovalDialog (default) or ApprovalNone
	Reason    string `json:"reason,omitempty"`
}

// TaskContentRequest is a Probe's fetch of a task intent's prompt.
type TaskContentRequest struct {
	Host     string `json:"host"`
	Epoch    int64  `json:"epoch"`
	IntentID string `json:"intent_id"`
}

// TaskContent is the prompt, from a replica's memory.
type TaskContent struct {
	Prompt string `json:"prompt"`
}

// AgentObserved is a session's agent adapter as the Probe last reported it (Observed.Agents).
type AgentObserved struct {
	Intent string    `json:"intent"`
	Status string    `json:"status"` // one of the Agent* statuses
	Reason string    `json:"reason,omitempty"`
	At     time.Time `json:"at"`
}

// TaskClient fetches task prompts: from whichever replica took the task, so it asks each replica
// in turn until one holds it.
type TaskClient struct {
	conns []*conn
	Host  string
}

// NewTaskClient returns the client of host for the replicas at endpoints.
func NewTaskClient(host string, endpoints []string, tc *tls.Config) (*TaskClient, error) {
	t := &TaskClient{Host: host}
	for _, e := range endpoints {
		c, err := newConn([]string{e}, tc)
		if err != nil {
			return nil, err
		}
		t.conns = append(t.conns, c)
	}
	if len(t.conns) == 0 {
		return nil, errors.New("--gateway: name at least one Gateway URL, e.g. https://127.0.0.1:7443")
	}
	return t, nil
}

// Prompt returns the prompt of the task intent id of epoch. A replica that does not hold it
// answers 404 and the next is asked; the last refusal is returned when none holds it.
func (t *TaskClient) Prompt(ctx context.Context, epoch int64, id string) (string, error) {
	var lastErr error
	for _, c := range t.conns {
		var out TaskContent
		err := c.do(ctx, http.MethodPost, PathProbeTask, NewTraceID(), TaskContentRequest{Host: t.Host, Epoch: epoch, IntentID: id}, &out)
		if err == nil {
			return out.Prompt, nil
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
	}
	return "", lastErr
}
