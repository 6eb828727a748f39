package daemon

import (
	"context"
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
