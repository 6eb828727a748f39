package daemon

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/allox-os/allox/internal/rpc"
	"github.com/allox-os/allox/services/internal/audit"
	"github.com/allox-os/allox/services/internal/fence"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestRouterAuditsMutations(t *testing.T) {
	dir := t.TempDir()
	r := NewRouter()
	r.SetAudit(&audit.Log{Dir: dir})
	ok := func(context.Context, *Call) (any, error) { return rpc.Run{RunID: "r1"}, nil }
	fenced := func(context.Context, *Call) (any, error) {
		return nil, &fence.FencedError{Fence: fence.Fence{AgentID: "a", SessionID: "s", Reason: "observer lost"}}
	}
	for name, a := range map[string]Action{
		"process.start":     {Handler: ok},
		"checkpoint.delete": {Handler: fenced},
		"session.unfence":   {Handler: ok, Scope: ScopeHost},
		"session.get":       {Handler: ok, ReadOnly: true},
	} {
		if err := r.Register(name, a); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []*Call{
		{Action: "process.start", Params: json.RawMessage(`{"agent_id":"a","session_id":"s"}`), Origin: Loopback},
		{Action: "checkpoint.delete", Params: json.RawMessage(`{"agent_id":"a","session_id":"s","checkpoint_id":"c"}`), Origin: Host},
		{Action: "session.unfence", Params: json.RawMessage(`{"agent_id":"a","session_id":"s"}`), Origin: Loopback},
		{Action: "session.get", Params: json.RawMessage(`{"agent_id":"a","session_id":"s"}`), Origin: Loopback},
		{Action: "no.such", Params: json.RawMessage(`{}`), Origin: Loopback},
		{Action: "process.start", Params: json.RawMessage(`{"agent_id":1}`), Origin: Loopback},
	} {
		_, _ = r.Dispatch(context.Background(), c)
	}
	got, err := audit.Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []audit.Entry{
		{Action: "process.start", AgentID: "a", SessionID: "s", RunID: "r1", Origin: "loopback", Outcome: "ok"},
		{Action: "checkpoint.delete", AgentID: "a", SessionID: "s", CheckpointID: "c", Origin: "host", Outcome: "conflict"},
		{Action: "session.unfence", AgentID: "a", SessionID: "s", Origin: "loopback", Outcome: "forbidden"},
		{Action: "process.start", RunID: "r1", Origin: "loopback", Outcome: "ok"},
	}
	if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(audit.Entry{}, "Time", "Error")); diff != "" {
		t.Errorf("audit log (-want +got):\n%s", diff)
	}
	if len(got) > 1 && got[1].Error == "" {
		t.Errorf("a refused call's entry carries no error message: %+v", got[1])
	}
}
