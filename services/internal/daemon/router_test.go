package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/allox-os/allox/internal/rpc"
)

func ok(context.Context, *Call) (any, error) { return map[string]bool{"done": true}, nil }

func TestRegister(t *testing.T) {
	r := NewRouter()
	for _, name := range []string{"session.create", "agent.create", "process.tree.list", "checkpoint.create_v2"} {
		if err := r.Register(name, Action{Handler: ok}); err != nil {
			t.Errorf("Register(%q): %v", name, err)
		}
	}
	if err := r.Register("agent.create", Action{Handler: ok}); !errors.Is(err, ErrDuplicateAction) {
		t.Errorf("duplicate Register = %v, want ErrDuplicateAction", err)
	}
	for _, name := range []string{"", "info", "System.info", "system.", ".info", "system..info", "system.info-x", "system info", "1system.info"} {
		if err := r.Register(name, Action{Handler: ok}); err == nil || !strings.Contains(err.Error(), "dotted lowercase") {
			t.Errorf("Register(%q) = %v, want a name error", name, err)
		}
	}
	if err := r.Register("system.nil", Action{}); err == nil || !strings.Contains(err.Error(), "BUG") {
		t.Errorf("Register with a nil handler = %v, want a BUG error", err)
	}
	want := []string{"agent.create", "checkpoint.create_v2", "process.tree.list", "session.create"}
	if diff := cmp.Diff(want, r.Actions()); diff != "" {
		t.Errorf("Actions mismatch (-want +got):\n%s", diff)
	}
}

func TestDispatch(t *testing.T) {
	r := NewRouter()
	r.Register("zeta.run", Action{Handler: ok})
	r.Register("alpha.run", Action{Handler: ok})
	r.Register("host.only", Action{Handler: ok, Scope: ScopeHost})
	ctx := context.Background()

	_, err := r.Dispatch(ctx, &Call{Action: "nope.run"})
	var e *rpc.Error
	if !errors.As(err, &e) || e.Code != rpc.CodeUnknownAction || e.Field != "action" {
		t.Fatalf("Dispatch(unknown) = %v, want unknown_action on field action", err)
	}
	if diff := cmp.Diff([]string{"alpha.run", "host.only", "zeta.run"}, e.Choices); diff != "" {
		t.Errorf("known actions mismatch (-want +got):\n%s", diff)
	}
	if !strings.Contains(e.Message, "use one of alpha.run, host.only, zeta.run") {
		t.Errorf("message %q does not list the known actions in order", e.Message)
	}

	if _, err := r.Dispatch(ctx, &Call{Action: "host.only", Origin: Loopback}); !errors.Is(err, rpc.CodeForbidden) {
		t.Errorf("HostOnly on loopback = %v, want forbidden", err)
	}
	if _, err := r.Dispatch(ctx, &Call{Action: "host.only", Origin: Host}); err != nil {
		t.Errorf("HostOnly on host = %v, want nil", err)
	}
	if _, err := r.Dispatch(ctx, &Call{Action: "alpha.run", Origin: Host}); err != nil {
		t.Errorf("ordinary action on host = %v, want nil", err)
	}
}

// echoParams answers with the params the handler saw.
func echoParams(_ context.Context, c *Call) (any, error) { return c.Params, nil }

func TestSessionCallsAreAboutTheCaller(t *testing.T) {
	r := NewRouter()
	r.Register("own.run", Action{Handler: echoParams, Scope: ScopeSession})
	r.Register("both.run", Action{Handler: echoParams, Scope: ScopeControl | ScopeSession})
	r.Register("control.run", Action{Handler: echoParams})
	me := &SessionRef{AgentID: "a", SessionID: "s1"}
	for _, tt := range []struct {
		name, action, params string
		want                 string // the params the handler saw, or the refused field
		code                 rpc.Code
	}{
		{"ids filled in", "own.run", `{}`, `{"agent_id":"a","session_id":"s1"}`, ""},
		{"own ids kept", "both.run", `{"agent_id":"a","session_id":"s1","turn_id":"1"}`, `{"agent_id":"a","session_id":"s1","turn_id":"1"}`, ""},
		{"another session", "own.run", `{"session_id":"s2"}`, "params.session_id", rpc.CodeForbidden},
		{"another agent", "own.run", `{"agent_id":"b","session_id":"s1"}`, "params.agent_id", rpc.CodeForbidden},
		{"an id of another type", "own.run", `{"session_id":1}`, "params.session_id", rpc.CodeForbidden},
		{"an empty id", "own.run", `{"agent_id":""}`, "params.agent_id", rpc.CodeForbidden},
		{"a key twice: the handler sees the value checked", "own.run", `{"session_id":"s2","session_id":"s1"}`, `{"agent_id":"a","session_id":"s1"}`, ""},
		{"a control action", "control.run", `{}`, "action", rpc.CodeForbidden},
		{"an unknown action", "nope.run", `{}`, "action", rpc.CodeUnknownAction},
	} {
		t.Run(tt.name, func(t *testing.T) {
			res, err := r.Dispatch(t.Context(), &Call{Action: tt.action, Params: json.RawMessage(tt.params), Origin: Session, Caller: me})
			if tt.code == "" {
				if err != nil || string(res.(json.RawMessage)) != tt.want {
					t.Errorf("params seen %s, %v; want %s", res, err, tt.want)
				}
				return
			}
			var e *rpc.Error
			if !errors.As(err, &e) || e.Code != tt.code || e.Field != tt.want {
				t.Fatalf("Dispatch = %v, want %s on %s", err, tt.code, tt.want)
			}
			if tt.code == rpc.CodeUnknownAction {
				if diff := cmp.Diff([]string{"both.run", "own.run"}, e.Choices); diff != "" {
					t.Errorf("a session socket lists what it does not serve (-want +got):\n%s", diff)
				}
			}
		})
	}
	// On the control listeners the ids are the caller's to choose.
	res, err := r.Dispatch(t.Context(), &Call{Action: "both.run", Params: json.RawMessage(`{"session_id":"s2"}`), Origin: Loopback})
	if err != nil || string(res.(json.RawMessage)) != `{"session_id":"s2"}` {
		t.Errorf("both.run on loopback: %s, %v", res, err)
	}
	if _, err := r.Dispatch(t.Context(), &Call{Action: "own.run", Params: json.RawMessage(`{}`), Origin: Loopback}); !errors.Is(err, rpc.CodeForbidden) {
		t.Errorf("a session-only action on loopback = %v, want forbidden", err)
	}
}
