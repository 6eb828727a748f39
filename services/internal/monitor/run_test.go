package monitor

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/allox-os/allox/services/internal/plugin"
	"github.com/allox-os/allox/services/internal/tracked"
)

// openLoaded opens m as the daemon's only plugin.
func openLoaded(t *testing.T, m *Monitor) *plugin.Loaded {
	t.Helper()
	l, err := plugin.Open(context.Background(), plugin.Deps{State: t.TempDir()}, []plugin.Plugin{{
		Manifest: plugin.Manifest{Name: Name, API: plugin.APIVersion, Version: Version}, Flag: "--monitor-root", Enabled: true, StartParams: StartParams,
		Open: func(context.Context, plugin.Core) (*plugin.Contribution, error) { return m.Contribution(), nil },
	}})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// Every run gets the session's endpoint and protocol; a run that does not start after all (an
// unknown session, a later refusal) leaves no reservation behind; a bad traceparent is refused.
func TestRunEnvAndUndo(t *testing.T) {
	m, err := Open(Config{Root: t.TempDir()}, noTurns{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	l := openLoaded(t, m)
	run, err := l.StartRun(context.Background(), plugin.RunStart{AgentID: "a", SessionID: "s"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ep := run.Env[EnvEndpoint]; !strings.HasPrefix(ep, "http://127.0.0.1:") || run.Env[EnvProtocol] != Protocol || len(run.Hooks) != 1 {
		t.Errorf("the run's env %v, hooks %d", run.Env, len(run.Hooks))
	}
	if m.info("a", "s") == nil {
		t.Error("session.get does not report the reserved endpoint")
	}
	run.Undo()
	if info := m.info("a", "s"); info != nil {
		t.Errorf("a run that never started left its session's reservation: %s", info)
	}
	// Two runs take the session's port; the first fails: the second still has it.
	first, err := l.StartRun(context.Background(), plugin.RunStart{AgentID: "a", SessionID: "s"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	second, err := l.StartRun(context.Background(), plugin.RunStart{AgentID: "a", SessionID: "s"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	first.Undo()
	if m.info("a", "s") == nil || second.Env[EnvEndpoint] != first.Env[EnvEndpoint] {
		t.Fatalf("a failed run dropped the port another starting run holds (%v, %v)", first.Env, second.Env)
	}
	if _, err := second.Hooks[0].Observer.Begin(&tracked.Status{Pid: os.Getpid()}); err != nil { // a run in the daemon's namespace
		t.Fatal(err)
	}
	second.Undo() // a later failure: the receiver is up, the session keeps it
	resp, err := http.Post(second.Env[EnvEndpoint]+"/v1/traces", ctJSON, strings.NewReader(`{}`))
	if err != nil {
		t.Fatalf("the session's receiver after its run began: %v", err)
	}
	resp.Body.Close()
	params := map[string]map[string]json.RawMessage{Name: {"traceparent": json.RawMessage(`"00-nope"`)}}
	if _, err := l.StartRun(context.Background(), plugin.RunStart{AgentID: "a", SessionID: "s"}, params); err == nil || !strings.Contains(err.Error(), "traceparent") {
		t.Errorf("a bad traceparent: %v, want refused", err)
	}
}
