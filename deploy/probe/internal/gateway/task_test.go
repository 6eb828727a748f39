package gateway

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/allox-os/allox/deploy/probe/internal/lease"
	"github.com/allox-os/allox/deploy/probe/internal/spec"
	"github.com/allox-os/allox/deploy/probe/internal/wire"
)

// placedTask is a cluster with alpha placed on host-a, whose Probe client and grant it returns.
func placedTask(t *testing.T, replicas int) (*cluster, *wire.AdminClient, *wire.ProbeClient, lease.Grant) {
	c := newCluster(t, replicas)
	c.lead(0)
	a := c.admin()
	p := c.probe("host-a")
	g := register(t, p, 2)
	keepAlive(t, p, g)
	apply(t, a, spec.DevBox{Name: "alpha", Runtime: "process", Sessions: []spec.Session{{Name: "s1"}, {Name: "s2"}}})
	c.eventually("alpha placed", func() bool { return get(t, a, "alpha").Placement != nil })
	return c, a, p, g
}

func randomText(what string) string {
	var b [12]byte
	rand.Read(b[:])
	return what + "-" + hex.EncodeToString(b[:])
}

func sendTask(t *testing.T, a *wire.AdminClient, req wire.TaskRequest) (string, error) {
	var id map[string]string
	err := a.Do(t.Context(), http.MethodPost, wire.PathTasks, req, &id)
	return id["id"], err
}

// A task becomes an intent for the session's host under the placement's epoch carrying the
// task's metadata and not its prompt; the Probe it is for fetches the prompt from the replica's
// memory under its epoch, nobody else does; the adapter's statuses land in the observed state
// and the audit; once the intent is done the replica forgets the prompt; and the prompt is
// nowhere in etcd (every key and value, the audit included).
func TestTaskIntentMetadataOnly(t *testing.T) {
	c, a, p, g := placedTask(t, 1)
	prompt := randomText("prompt")
	id, err := sendTask(t, a, wire.TaskRequest{DevBox: "alpha", Session: "s1", CLI: "claude_code", Prompt: prompt,
		ModelURL: "http://10.0.2.100:8080", Model: "scripted", APIKeyRef: "anthropic", Reason: "test"})
	if err != nil {
		t.Fatal(err)
	}
	in, err := p.Pull(t.Context(), g.Epoch, 0, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var task *wire.Intent
	for i := range in.Intents {
		if in.Intents[i].ID == id {
			task = &in.Intents[i]
		}
	}
	want := wire.TaskSpec{CLI: "claude_code", ModelURL: "http://10.0.2.100:8080", Model: "scripted", APIKeyRef: "anthropic", Approval: wire.ApprovalDialog, PromptBytes: len(prompt)}
	if task == nil || task.Kind != wire.IntentTask || task.Epoch != g.Epoch || task.Session != "s1" || task.Task == nil || *task.Task != want {
		t.Fatalf("the pulled intents %+v: want task %s of s1 under epoch %d with %+v", in.Intents, id, g.Epoch, want)
	}
	tc, err := wire.NewTaskClient("host-a", c.urls, c.tls("host-a", wire.RoleProbe))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := tc.Prompt(t.Context(), g.Epoch, id); err != nil || got != prompt {
		t.Fatalf("the Probe's fetch of the prompt: %q, %v", got, err)
	}
	if _, err := tc.Prompt(t.Context(), g.Epoch-1, id); !errors.Is(err, lease.ErrLost) {
		t.Errorf("a fetch under a stale epoch: %v, want lease lost", err)
	}
	other := c.probe("host-b")
	gb := register(t, other, 1)
	keepAlive(t, other, gb)
	ob, _ := wire.NewTaskClient("host-b", c.urls, c.tls("host-b", wire.RoleProbe))
	if got, err := ob.Prompt(t.Context(), gb.Epoch, id); err == nil || got != "" {
		t.Errorf("another host fetched the prompt: %q, %v", got, err)
	}
	err = p.Report(t.Context(), g.Epoch, []wire.Event{
		{Kind: wire.EventAgentStatus, Epoch: g.Epoch, IntentID: id, DevBox: "alpha", Session: "s1", Phase: wire.AgentApproval, Reason: "agent claude_code waiting_for_approval", TraceID: task.TraceID},
	})
	if err != nil {
		t.Fatal(err)
	}
	st := get(t, a, "alpha")
	if ag := st.Observed.Agents["s1"]; ag.Intent != id || ag.Status != wire.AgentApproval {
		t.Errorf("gateway get: the session's agent %+v, want %s waiting_for_approval", ag, id)
	}
	bad := wire.Event{Kind: wire.EventAgentStatus, Epoch: g.Epoch, IntentID: id, DevBox: "alpha", Session: "s1", Phase: "thinking", TraceID: task.TraceID}
	if err := p.Report(t.Context(), g.Epoch, []wire.Event{bad}); err == nil || !strings.Contains(err.Error(), "waiting_for_approval") {
		t.Errorf("an agent.status of an unknown status: %v, want refused naming the statuses", err)
	}
	if err := p.Report(t.Context(), g.Epoch, []wire.Event{{Kind: wire.EventIntentDone, Epoch: g.Epoch, IntentID: id, TraceID: task.TraceID}}); err != nil {
		t.Fatal(err)
	}
	if got, err := tc.Prompt(t.Context(), g.Epoch, id); err == nil {
		t.Errorf("the prompt still handed out after the intent was done: %q", got)
	}
	recs, err := c.gws[0].Audit(t.Context(), "", 1000)
	if err != nil {
		t.Fatal(err)
	}
	actions := map[string]bool{}
	for _, r := range recs {
		actions[r.Action] = true
	}
	if !actions[wire.IntentTask] || !actions[wire.EventAgentStatus] {
		t.Errorf("audit actions %v: want the task and its agent.status", actions)
	}
	assertNotInEtcd(t, c.cli, prompt)
}

// assertNotInEtcd reads every key and value of the store and fails if s is in any.
func assertNotInEtcd(t *testing.T, cli *clientv3.Client, s string) {
	t.Helper()
	resp, err := cli.Get(t.Context(), "", clientv3.WithFromKey())
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) < 5 {
		t.Fatalf("etcd holds %d keys: the scan reads nothing", len(resp.Kvs))
	}
	for _, kv := range resp.Kvs {
		if strings.Contains(string(kv.Key), s) || strings.Contains(string(kv.Value), s) {
			t.Errorf("etcd key %s holds the task's prompt", kv.Key)
		}
	}
}

// A prompt held by one replica is fetched through another's refusal: the Probe asks each in turn.
func TestTaskPromptFromTheReplicaThatTookIt(t *testing.T) {
	c, _, _, g := placedTask(t, 2)
	second, err := wire.NewAdminClient(c.urls[1:], c.tls("ops2", wire.RoleAdmin))
	if err != nil {
		t.Fatal(err)
	}
	prompt := randomText("prompt")
	id, err := sendTask(t, second, wire.TaskRequest{DevBox: "alpha", Session: "s2", CLI: "codex", Prompt: prompt, Approval: wire.ApprovalNone})
	if err != nil {
		t.Fatal(err)
	}
	first, _ := wire.NewTaskClient("host-a", c.urls[:1], c.tls("host-a", wire.RoleProbe))
	if _, err := first.Prompt(t.Context(), g.Epoch, id); err == nil {
		t.Error("replica a handed out a prompt that replica b took")
	}
	both, _ := wire.NewTaskClient("host-a", c.urls, c.tls("host-a", wire.RoleProbe))
	if got, err := both.Prompt(t.Context(), g.Epoch, id); err != nil || got != prompt {
		t.Errorf("the fetch from both replicas: %q, %v", got, err)
	}
}

// Each bad task is refused naming its field, and writes no intent.
func TestTaskRefusals(t *testing.T) {
	_, a, p, g := placedTask(t, 1)
	ok := wire.TaskRequest{DevBox: "alpha", Session: "s1", CLI: "claude_code", Prompt: "do it"}
	for name, tc := range map[string]struct {
		edit func(*wire.TaskRequest)
		want string
	}{
		"unknown cli":          {func(r *wire.TaskRequest) { r.CLI = "aider" }, "cli"},
		"empty prompt":         {func(r *wire.TaskRequest) { r.Prompt = " " }, "prompt"},
		"prompt too long":      {func(r *wire.TaskRequest) { r.Prompt = strings.Repeat("x", wire.MaxPrompt+1) }, "prompt"},
		"a key, not its name":  {func(r *wire.TaskRequest) { r.APIKeyRef = "sk-ant-api03/../../etc/passwd" }, "api_key_ref"},
		"model url with creds": {func(r *wire.TaskRequest) { r.ModelURL = "http://u:p@10.0.2.100:8080" }, "model_url"},
		"model url not http":   {func(r *wire.TaskRequest) { r.ModelURL = "file:///etc/passwd" }, "model_url"},
		"unknown approval":     {func(r *wire.TaskRequest) { r.Approval = "auto" }, "approval"},
		"unknown session":      {func(r *wire.TaskRequest) { r.Session = "s9" }, "session"},
		"unknown devbox":       {func(r *wire.TaskRequest) { r.DevBox = "nope" }, "devbox"},
	} {
		t.Run(name, func(t *testing.T) {
			req := ok
			tc.edit(&req)
			if _, err := sendTask(t, a, req); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("task %+v: %v, want refused naming %s", req, err, tc.want)
			}
		})
	}
	in, err := p.Pull(t.Context(), g.Epoch, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range in.Intents {
		if it.Kind == wire.IntentTask {
			t.Errorf("a refused task left intent %+v", it)
		}
	}
}

// Attack: a Probe's certificate sends a task (the operator API), an operator's certificate
// fetches a prompt (the Probe API), a Probe fetches a prompt for another host, and a Probe
// reports an agent status for a DevBox placed elsewhere: each refused, nothing written.
func TestAttackTaskAPIs(t *testing.T) {
	c, a, p, g := placedTask(t, 1)
	prompt := randomText("prompt")
	id, err := sendTask(t, a, wire.TaskRequest{DevBox: "alpha", Session: "s1", CLI: "claude_code", Prompt: prompt})
	if err != nil {
		t.Fatal(err)
	}
	asProbe, _ := wire.NewAdminClient(c.urls, c.tls("host-a", wire.RoleProbe))
	_, err = sendTask(t, asProbe, wire.TaskRequest{DevBox: "alpha", Session: "s1", CLI: "claude_code", Prompt: "x"})
	refusedWith(t, err, 403)
	asAdmin, _ := wire.NewTaskClient("host-a", c.urls, c.tls("ops", wire.RoleAdmin))
	_, err = asAdmin.Prompt(t.Context(), g.Epoch, id)
	refusedWith(t, err, 403)
	evil, _ := wire.NewTaskClient("host-a", c.urls, c.tls("host-b", wire.RoleProbe))
	got, err := evil.Prompt(t.Context(), g.Epoch, id)
	refusedWith(t, err, 403)
	if got != "" {
		t.Errorf("host-b's certificate fetched host-a's prompt: %q", got)
	}
	pb := c.probe("host-b")
	gb := register(t, pb, 0)
	err = pb.Report(t.Context(), gb.Epoch, []wire.Event{{Kind: wire.EventAgentStatus, Epoch: gb.Epoch, IntentID: id, DevBox: "alpha", Session: "s1", Phase: wire.AgentDone}})
	refusedWith(t, err, 403)
	if o := get(t, a, "alpha").Observed; o != nil && len(o.Agents) != 0 {
		t.Errorf("host-b wrote alpha's agent status: %+v", o.Agents)
	}
	in, _ := p.Pull(t.Context(), g.Epoch, 0, 0)
	tasks := 0
	for _, it := range in.Intents {
		if it.Kind == wire.IntentTask {
			tasks++
		}
	}
	if tasks != 1 {
		t.Errorf("%d task intents pending, want the one the operator sent", tasks)
	}
}

// The Probe's prompt client has one call: fetching a task's prompt.
func TestTaskClientHasOnlyPrompt(t *testing.T) {
	var got []string
	for m := range reflect.TypeFor[*wire.TaskClient]().Methods() {
		got = append(got, m.Name)
	}
	if !slices.Equal(got, []string{"Prompt"}) {
		t.Errorf("TaskClient methods = %v, want exactly [Prompt]", got)
	}
}
