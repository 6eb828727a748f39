// Package plugin is Plugin API version 1: the contract between the workspace daemon's core and
// its optional features (the seed's process-tree provider, session share, session network, the
// system-effects observer and the monitor).
//
// A plugin is installed when it is linked into the daemon (the image spec's plugins = [...]) and
// enabled when the daemon's command line turns it on (its Flag); the two are independent, and an
// installed plugin that is not enabled is never opened and changes nothing in the execution path.
// The core opens the enabled plugins in a fixed order (the order of the list main hands to Open),
// with the core services they may use (Core), checks each one's API version first, and merges what
// each contributes (Contribution): a command prefix wrapped around every sandboxed run's launch
// (in load order, outermost first), environment variables and bubblewrap mounts for runs, RPC
// actions with the listeners they are served on, process.start params, run hooks and run metadata.
// Two plugins (or a plugin and the core) that contribute the same action, environment variable,
// mount target or process.start param are refused at start, naming both. Plugins are closed in
// reverse load order at shutdown, and when one fails to open, the ones already open are closed in
// reverse order before the error is returned.
//
// The package is the contract only: it does not log and knows nothing of HTTP.
package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"

	"github.com/allox-os/allox/services/internal/tracked"
	"github.com/allox-os/allox/services/internal/workspace"
)

// APIVersion is the Plugin API version this daemon speaks.
const APIVersion = 1

// Manifest names a plugin.
type Manifest struct {
	// Name is the plugin's name, as the image spec's plugins attribute spells it ("process-tree").
	Name string `json:"name"`
	// API is the Plugin API version the plugin was built for; the core refuses any other.
	API int `json:"api_version"`
	// Version is the plugin's own version.
	Version string `json:"version"`
}

// Plugin is an installed plugin, as main hands it to Open.
type Plugin struct {
	Manifest
	// Flag is the daemon flag that enables it, as a user writes it ("--observer").
	Flag string
	// Enabled reports whether the daemon's command line enables it.
	Enabled bool
	// StartParams are the process.start params the plugin owns (system-effects: "recovery",
	// "checkpoint_id"). While the plugin is enabled they reach it in RunStart.Params; while it is
	// installed but not enabled, a request that sets one is refused naming Flag.
	StartParams []string
	// SessionParams are the session.create params the plugin owns (session-network: "network"),
	// routed and refused like StartParams; they reach its SessionHooks.Create.
	SessionParams []string
	// Open opens the plugin with the core services it may use and returns what it contributes.
	// An error stops the daemon (the plugin was asked for).
	Open func(ctx context.Context, core Core) (*Contribution, error)
}

// Core is what the core lends a plugin when it opens.
type Core struct {
	// Workspace is the workspace runtime: the only way to the store, runs, fences and policy.
	Workspace *workspace.Service
	// State is the plugin's own state directory, outside every workspace (created 0700):
	// <daemon state>/plugins/<name>.
	State string
	// Log is the daemon's logger, with the plugin's name attached.
	Log *slog.Logger
}

// Contribution is what an open plugin adds to the daemon. Every field may be left empty.
type Contribution struct {
	// Prefix is wrapped around every sandboxed run's launch; see tracked.Extra.Prefix (it must
	// exec the rest of its arguments, keeping its pid and descriptors).
	Prefix []string
	// Env is set in every run's environment; a request may not override it.
	Env map[string]string
	// Mounts are bound into every sandboxed run.
	Mounts []tracked.Mount
	// Actions are the RPC actions the plugin serves, by name, each with the listeners it is served
	// on (Scope) — the guest's control listeners, the host listener only, or the session socket.
	Actions map[string]Action
	// Run, if set, takes part in every process.start, in load order, before the run starts. It
	// may refuse the request (the start then fails and nothing runs) and returns the run's hooks
	// (nil: it does not watch this run).
	Run func(ctx context.Context, r *RunStart) (RunHook, error)
	// Frozen asks for every run's cgroup to be frozen around the plugin's hooks (see
	// tracked.Hook.Frozen): for a plugin that must see the sandbox still, as the system-effects
	// observer does. It costs each run's start the wait for bwrap's setup to freeze.
	Frozen bool
	// RunEnv are the environment variables the plugin may set per run, from its Run
	// (RunStart.SetEnv), e.g. only for the sessions whose mode wants them; like Env, no other
	// contribution may name them.
	RunEnv []string
	// NetNS says the plugin starts runs in network namespaces of its own (RunStart.SetNetNS); only
	// one plugin may.
	NetNS bool
	// Sessions, if set, takes part in every session's life.
	Sessions *SessionHooks
	// Close releases what the plugin holds; it is called once, in reverse load order.
	Close func() error
}

// SessionHooks are a plugin's part in the sessions' life.
type SessionHooks struct {
	// Create is called once session.create has made the session, in load order, with the
	// session.create params the plugin owns that the request set. An error removes the session
	// again, and every plugin sees Deleted: a failed request changes nothing.
	Create func(ctx context.Context, s SessionStart) error
	// Info is what session.get and session.list report under plugins.<name> (nil: nothing).
	Info func(agentID, sessionID string) json.RawMessage
	// Deleted is called after session.delete has removed the session, and after a failed
	// session.create (also for a plugin whose Create never ran: it must accept a session it does
	// not know), in reverse load order: the plugin drops what it kept for the session. The
	// session is gone either way, so an error is only reported.
	Deleted func(agentID, sessionID string) error
}

// SessionStart is one session.create as a plugin's SessionHooks.Create sees it.
type SessionStart struct {
	AgentID, SessionID string
	// Params are the session.create params the plugin owns that the request set, undecoded.
	Params map[string]json.RawMessage
}

// RunStart is one process.start as a plugin's Run sees it.
type RunStart struct {
	AgentID, SessionID string
	// Managed says the run goes the managed (unsandboxed) path.
	Managed bool
	// Params are the process.start params the plugin owns (Plugin.StartParams) that the request
	// set, undecoded.
	Params map[string]json.RawMessage
	// Argv and Env are the request's command and environment (read only; the monitor reads a
	// W3C TRACEPARENT from it).
	Argv []string
	Env  map[string]string

	undo   []func()
	runEnv []string // what the plugin declared (Contribution.RunEnv)
	env    map[string]string
	mayNS  bool
	netns  *os.File
}

// SetEnv sets one of the variables the plugin declared in Contribution.RunEnv for this run.
func (r *RunStart) SetEnv(name, value string) error {
	if !slices.Contains(r.runEnv, name) {
		return fmt.Errorf("BUG: %s is not in the plugin's RunEnv", name)
	}
	if r.env == nil {
		r.env = map[string]string{}
	}
	r.env[name] = value
	return nil
}

// SetNetNS starts the run in the network namespace ns (the plugin must declare
// Contribution.NetNS). The caller keeps ns open until the run has started (OnFailure or its hook).
func (r *RunStart) SetNetNS(ns *os.File) error {
	if !r.mayNS {
		return errors.New("BUG: the plugin did not declare Contribution.NetNS")
	}
	r.netns = ns
	return nil
}

// OnFailure registers f to be called if the run does not start after all (a later plugin refuses
// it, or its sandbox cannot be set up): a failed request leaves everything as it was.
func (r *RunStart) OnFailure(f func()) { r.undo = append(r.undo, f) }

// RunHook is a plugin's part in one run: Begin after bwrap has started and before the run's
// command is released (bwrap waits on its block fd), End after the run's last process has exited
// (the group is empty but in place); both with the run's cgroup frozen when a plugin of the run
// asks (Contribution.Frozen). What either returns is the plugin's run
// metadata, shown in process.get and process.wait under the plugin's name (nil from End keeps
// Begin's). An error from Begin fails the start closed (the run's cgroup is killed; the command
// never ran); an error from End is recorded in the run's reason.
type RunHook interface {
	Begin(st *tracked.Status) (json.RawMessage, error)
	End(st *tracked.Status, quiesce error) (json.RawMessage, error)
}

// ResidueHook is implemented by a RunHook that looks at the processes a managed run left behind
// when its main process exited, with the group frozen, before they are killed.
type ResidueHook interface {
	Residue(st *tracked.Status) error
}
