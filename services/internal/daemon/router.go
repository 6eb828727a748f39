package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/allox-os/allox/internal/rpc"
	"github.com/allox-os/allox/services/internal/audit"
	"github.com/allox-os/allox/services/internal/plugin"
)

// ErrDuplicateAction is returned when an action name is registered twice.
var ErrDuplicateAction = errors.New("action already registered")

// The call types are Plugin API v1's (package plugin), so that core domains and plugins register
// the same handlers.
type (
	Origin     = plugin.Origin
	Scope      = plugin.Scope
	SessionRef = plugin.SessionRef
	Call       = plugin.Call
	Handler    = plugin.Handler
	Action     = plugin.Action
)

// Origins and scopes, as in package plugin.
const (
	Loopback      = plugin.Loopback
	Host          = plugin.Host
	Session       = plugin.Session
	ScopeLoopback = plugin.ScopeLoopback
	ScopeHost     = plugin.ScopeHost
	ScopeSession  = plugin.ScopeSession
	ScopeControl  = plugin.ScopeControl
)

// Router maps action names to handlers. Domains and plugins register into it explicitly, from main;
// it is safe for concurrent use, so registration may also happen while serving.
type Router struct {
	mu      sync.RWMutex
	actions map[string]Action
	audit   *audit.Log
}

// SetAudit makes every call of an action that is not ReadOnly append one entry to l: the action,
// the ids it names, the listener it came in on and its outcome (OK or the error code).
func (r *Router) SetAudit(l *audit.Log) {
	r.mu.Lock()
	r.audit = l
	r.mu.Unlock()
}

// NewRouter returns an empty router.
func NewRouter() *Router { return &Router{actions: map[string]Action{}} }

var actionName = regexp.MustCompile(`^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$`)

// Register adds an action. Names are dotted lowercase words, domain first ("session.create").
// Registering a name twice returns an error wrapping ErrDuplicateAction.
func (r *Router) Register(name string, a Action) error {
	if !actionName.MatchString(name) || len(name) > rpc.MaxActionBytes {
		return fmt.Errorf("register action %q: the name must be dotted lowercase words, domain first, e.g. \"session.create\"", name)
	}
	if a.Handler == nil {
		return fmt.Errorf("register action %q: BUG: nil handler", name)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.actions[name]; dup {
		return fmt.Errorf("register action %q: %w", name, ErrDuplicateAction)
	}
	r.actions[name] = a
	return nil
}

// Actions returns the registered action names, sorted.
func (r *Router) Actions() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return slices.Sorted(maps.Keys(r.actions))
}

// Dispatch finds the call's action, applies its guards, runs it and audits it.
func (r *Router) Dispatch(ctx context.Context, c *Call) (any, error) {
	r.mu.RLock()
	a, ok := r.actions[c.Action]
	log := r.audit
	r.mu.RUnlock()
	if !ok || a.ReadOnly || log == nil {
		return r.dispatch(ctx, a, ok, c)
	}
	res, err := r.dispatch(ctx, a, ok, c)
	// The reply is decided; a log that cannot be written does not change it (a failing state dir
	// shows in the operations themselves).
	_ = log.Append(auditEntry(c, res, err))
	return res, err
}

func (r *Router) dispatch(ctx context.Context, a Action, ok bool, c *Call) (any, error) {
	if !ok {
		known := r.ActionsOn(c.Origin)
		return nil, &rpc.Error{Code: rpc.CodeUnknownAction, Field: "action", Choices: known,
			Message: fmt.Sprintf("unknown action %q: use one of %s", c.Action, strings.Join(known, ", "))}
	}
	if !a.Scope.Serves(c.Origin) {
		return nil, rpc.Errorf(rpc.CodeForbidden, "action", "%s is not served on the %s listener: %s", c.Action, c.Origin, a.Scope.Where())
	}
	if c.Origin == Session {
		if err := bindCaller(c); err != nil {
			return nil, err
		}
	}
	if a.Stream && !c.Upgrade {
		return nil, rpc.Errorf(rpc.CodeInvalidParams, "Upgrade",
			"%s answers with a byte stream: send it with \"Connection: Upgrade\" and \"Upgrade: %s\" (the allox client does)", c.Action, plugin.StreamProtocol)
	}
	res, err := a.Handler(ctx, c)
	if err == nil && a.Stream {
		if _, ok := res.(plugin.Relay); !ok {
			return nil, fmt.Errorf("BUG: stream action %s returned %T, not a plugin.Relay", c.Action, res)
		}
	}
	return res, err
}

// ActionsOn returns the names of the actions served on the listener o, sorted. A session socket
// lists only its own actions: what else the daemon serves is none of a session's business.
func (r *Router) ActionsOn(o Origin) []string {
	if o != Session {
		return r.Actions()
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	var out []string
	for name, a := range r.actions {
		if a.Scope.Serves(o) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// bindCaller makes a session socket's call about its caller, in one place for the core's actions
// and the plugins' alike: the params' agent_id and session_id are set to the caller's when left
// out, and a call naming another agent or session is refused (CodeForbidden, naming the field).
// So every action served on ScopeSession takes agent_id and session_id and gets the caller's.
// The handler sees the params re-encoded from what was checked (a key given twice never
// reaches it with a second value).
func bindCaller(c *Call) error {
	if c.Caller == nil {
		return errors.New("BUG: a session socket call without its caller")
	}
	var p map[string]json.RawMessage
	if err := json.Unmarshal(c.Params, &p); err != nil {
		return rpc.Errorf(rpc.CodeInvalidParams, "params", "params must be a JSON object: %v", err)
	}
	if p == nil {
		p = map[string]json.RawMessage{}
	}
	for _, f := range []struct{ key, kind, own string }{
		{"agent_id", "agent", c.Caller.AgentID}, {"session_id", "session", c.Caller.SessionID},
	} {
		raw, given := p[f.key]
		if !given {
			p[f.key], _ = json.Marshal(f.own)
			continue
		}
		if got := ""; json.Unmarshal(raw, &got) != nil || got != f.own {
			return rpc.Errorf(rpc.CodeForbidden, "params."+f.key,
				"params.%s %.64s is not this socket's %s: a session socket serves only its own session (%s/%s); leave %s out",
				f.key, raw, f.kind, c.Caller.AgentID, c.Caller.SessionID, f.key)
		}
	}
	var err error
	c.Params, err = json.Marshal(p)
	return err
}
