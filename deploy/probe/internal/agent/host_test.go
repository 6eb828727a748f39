package agent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/allox-os/allox/deploy/probe/internal/probe"
	"github.com/allox-os/allox/deploy/probe/internal/wire"
)

// hangingSandbox is an appliance whose every call waits until the test ends: an adapter started
// on it stays running (logic only; the real appliance is in ../../agent_test.go).
type hangingSandbox struct{ srv *httptest.Server }

func newHangingSandbox(t *testing.T) hangingSandbox {
	done := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-done:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { close(done); srv.Close() })
	return hangingSandbox{srv}
}

func (s hangingSandbox) Endpoint() string           { return s.srv.URL }
func (s hangingSandbox) Token() string              { return "t" }
func (s hangingSandbox) Done() <-chan struct{}      { return nil }
func (s hangingSandbox) Stop(context.Context) error { return nil }

func start(id, session string, sb probe.Sandbox) probe.TaskStart {
	return probe.TaskStart{IntentID: id, Epoch: 7, DevBox: "alpha", Agent: "main", Session: session, Sandbox: sb,
		Task: wire.TaskSpec{CLI: "claude_code", Approval: wire.ApprovalDialog, APIKeyRef: "anthropic"}}
}

func keyDir(t *testing.T, mode os.FileMode) (dir, key string) {
	dir, key = t.TempDir(), "sk-ant-"+strings.Repeat("k", 20)
	if err := os.WriteFile(filepath.Join(dir, "anthropic"), []byte(key+"\n"), mode); err != nil {
		t.Fatal(err)
	}
	os.Chmod(filepath.Join(dir, "anthropic"), mode)
	return dir, key
}

// One adapter per task intent (a second start of the same intent fetches nothing and starts
// nothing), and one running task per session: another session's task starts beside it.
func TestHostStartsOncePerIntentAndSession(t *testing.T) {
	sb := newHangingSandbox(t)
	dir, key := keyDir(t, 0o600)
	var fetched atomic.Int32
	h := &Host{Keys: dir, Prompt: func(_ context.Context, epoch int64, id string) (string, error) {
		fetched.Add(1)
		return "the prompt of " + id, nil
	}}
	ctx := t.Context()
	if _, err := h.StartTask(ctx, start("task-1", "s1", sb)); err != nil {
		t.Fatal(err)
	}
	if _, err := h.StartTask(ctx, start("task-1", "s1", sb)); err != nil {
		t.Fatal(err)
	}
	if n := fetched.Load(); n != 1 {
		t.Errorf("the prompt was fetched %d times for one intent, want 1", n)
	}
	if _, err := h.StartTask(ctx, start("task-2", "s1", sb)); !errors.Is(err, ErrSessionBusy) {
		t.Errorf("a second task while s1's runs: %v, want ErrSessionBusy", err)
	}
	if _, err := h.StartTask(ctx, start("task-3", "s2", sb)); err != nil {
		t.Errorf("another session's task: %v", err)
	}
	a, ok := h.Adapter("task-1")
	if !ok || a.cfg.Task.APIKey != key || a.cfg.Task.Prompt != "the prompt of task-1" || !a.cfg.Task.Dialog || a.cfg.IntentID != "task-1" {
		t.Errorf("task-1's adapter: %+v", a.cfg.Task)
	}
	if argv := strings.Join(a.cfg.CLI.Argv(a.cfg.CLI.Binary, a.cfg.Task), " "); !strings.Contains(argv, HookCommand) || !strings.Contains(argv, `"PreToolUse"`) {
		t.Errorf("claude_code with dialog approval: argv %q has no PreToolUse hook", argv)
	}
}

// An API key is read by its reference from the key directory alone; a key others may read, a
// missing one or a name that leaves the directory is refused, naming the reference and never
// the value; a prompt that cannot be fetched fails the start.
func TestHostKeyRefusals(t *testing.T) {
	sb := newHangingSandbox(t)
	open, key := keyDir(t, 0o644)
	prompt := func(context.Context, int64, string) (string, error) { return "p", nil }
	for name, tc := range map[string]struct {
		h    *Host
		ref  string
		want string
	}{
		"readable by others": {&Host{Keys: open, Prompt: prompt}, "anthropic", "chmod 600"},
		"missing":            {&Host{Keys: t.TempDir(), Prompt: prompt}, "anthropic", "no key file"},
		"no key directory":   {&Host{Prompt: prompt}, "anthropic", "--agent-keys"},
		"leaves the dir":     {&Host{Keys: open, Prompt: prompt}, "../anthropic", "not a key name"},
		"prompt lost": {&Host{Prompt: func(context.Context, int64, string) (string, error) {
			return "", errors.New("no replica holds it")
		}}, "", "no replica holds it"},
	} {
		t.Run(name, func(t *testing.T) {
			st := start("task-"+name, "s1", sb)
			st.Task.APIKeyRef = tc.ref
			_, err := tc.h.StartTask(t.Context(), st)
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), key) {
				t.Errorf("StartTask: %v, want refused naming %q and not the key", err, tc.want)
			}
			if _, ok := tc.h.Adapter(st.IntentID); ok {
				t.Error("a refused start left an adapter")
			}
		})
	}
}

// Dialog approval is served for every CLI: claude_code and opencode by their hooks, codex by its
// screen; opencode's adapter starts it with the dialog plugin.
func TestHostDialogApprovalPerCLI(t *testing.T) {
	sb := newHangingSandbox(t)
	dir, _ := keyDir(t, 0o600)
	h := &Host{Keys: dir, Prompt: func(context.Context, int64, string) (string, error) { return "p", nil }}
	for i, cli := range []string{"codex", "opencode"} {
		st := start(fmt.Sprint("task-", i), "s-"+cli, sb)
		st.Task.CLI = cli
		if _, err := h.StartTask(t.Context(), st); err != nil {
			t.Errorf("%s with dialog approval: %v", cli, err)
		}
	}
	a, ok := h.Adapter("task-1")
	if !ok || !a.cfg.Task.Dialog || !strings.Contains(a.cfg.CLI.Env(a.cfg.Task)["ALLOX_OPENCODE_PLUGIN"], `"tool.execute.before"`) {
		t.Errorf("opencode's adapter with dialog approval has no plugin: %+v", a)
	}
}
