package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/allox-os/allox/internal/rpc"
	"github.com/allox-os/allox/services/internal/tracked"
	"github.com/allox-os/allox/services/internal/workspace"
)

// ErrConflict is matched by the error Open returns when two contributions collide.
var ErrConflict = errors.New("plugin contributions conflict")

// ErrVersion is matched by the error Open returns for a plugin built for another API version.
var ErrVersion = errors.New("plugin API version mismatch")

// ErrNotInstalled is matched by the error Open returns when a plugin that is not linked into the
// daemon is enabled.
var ErrNotInstalled = errors.New("plugin not installed")

// Deps are what Open needs from the core.
type Deps struct {
	Workspace *workspace.Service
	// State is the daemon's state directory; each plugin gets State/plugins/<name>.
	State string
	Log   *slog.Logger
	// The core's own names, which no plugin may contribute: its actions, the environment
	// variables it sets in runs, its mount targets (a plugin's may not equal one or nest with
	// one) and its process.start params.
	Actions, Env, Mounts, StartParams []string
}

// Loaded holds the open plugins, in load order, and what they contribute, merged.
type Loaded struct {
	known  []Plugin
	open   []*opened
	extra  tracked.Extra
	owners map[string]string // contributed name ("action x", "env X", "mount /t", "param p") → plugin
}

type opened struct {
	Plugin
	c *Contribution
}

// Open is New followed by Loaded.Open.
func Open(ctx context.Context, deps Deps, known []Plugin) (*Loaded, error) {
	l, err := New(known)
	if err != nil {
		return nil, err
	}
	if err := l.Open(ctx, deps); err != nil {
		return nil, err
	}
	return l, nil
}

// New checks the daemon's plugins before any opens. known lists every plugin the daemon knows
// of, in load order, installed or not (Plugin.Open is nil for one that is not linked in), so that
// enabling one that is not installed fails naming its flag and the image spec line that installs
// it. A plugin built for another API version is refused, naming both versions.
func New(known []Plugin) (*Loaded, error) {
	seen := map[string]bool{}
	for _, p := range known {
		switch {
		case seen[p.Name]:
			return nil, fmt.Errorf("BUG: plugin %q is listed twice", p.Name)
		case p.Enabled && p.Open == nil:
			return nil, fmt.Errorf("%s: %w: the %s plugin is not installed in this image: add plugins = [%q] to the daemon's service block in the image spec",
				p.Flag, ErrNotInstalled, p.Name, p.Name)
		case p.Open != nil && p.API != APIVersion:
			return nil, fmt.Errorf("plugin %s %s: %w: it was built for Plugin API v%d, and this daemon speaks Plugin API v%d: build the image so that the daemon and its plugins come from the same source",
				p.Name, p.Version, ErrVersion, p.API, APIVersion)
		}
		seen[p.Name] = true
	}
	return &Loaded{known: known, owners: map[string]string{}}, nil
}

// Open opens every enabled plugin, in load order, and merges its contribution, refusing one that
// collides with the core's (deps) or another plugin's. When anything fails, the plugins already
// open are closed in reverse order before the error is returned. The core may hand l to its
// handlers before Open: until then it contributes nothing.
func (l *Loaded) Open(ctx context.Context, deps Deps) error {
	core := "the core"
	for _, n := range deps.Actions {
		l.owners["action "+n] = core
	}
	for _, n := range deps.Env {
		l.owners["env "+n] = core
	}
	for _, n := range deps.StartParams {
		l.owners["param "+n] = core
	}
	for _, p := range l.known {
		if !p.Enabled {
			continue
		}
		c, err := openOne(ctx, deps, p)
		if err == nil {
			l.open = append(l.open, &opened{Plugin: p, c: c})
			err = l.merge(p, c, deps.Mounts)
		}
		if err != nil {
			return errors.Join(err, l.Close())
		}
	}
	return nil
}

func openOne(ctx context.Context, deps Deps, p Plugin) (*Contribution, error) {
	state := filepath.Join(deps.State, "plugins", p.Name)
	if err := os.MkdirAll(state, 0o700); err != nil {
		return nil, fmt.Errorf("plugin %s: state dir: %w", p.Name, err)
	}
	log := deps.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c, err := p.Open(ctx, Core{Workspace: deps.Workspace, State: state, Log: log.With("plugin", p.Name)})
	if err != nil {
		return nil, fmt.Errorf("%s: open the %s plugin: %w", p.Flag, p.Name, err)
	}
	if c == nil {
		c = &Contribution{}
	}
	return c, nil
}

// merge adds p's contribution to what the plugins before it contributed, refusing collisions.
func (l *Loaded) merge(p Plugin, c *Contribution, coreMounts []string) error {
	var errs []error
	claim := func(kind, name string) {
		key := kind + " " + name
		if other, ok := l.owners[key]; ok {
			errs = append(errs, fmt.Errorf("%w: the %s plugin and %s both contribute the %s %s: enable only one of them", ErrConflict, p.Name, owner(other), kindWord(kind), name))
			return
		}
		l.owners[key] = p.Name
	}
	for _, n := range slices.Sorted(maps.Keys(c.Actions)) {
		claim("action", n)
	}
	for _, n := range slices.Sorted(maps.Keys(c.Env)) {
		claim("env", n)
	}
	for _, n := range c.RunEnv {
		claim("env", n)
	}
	for _, n := range p.StartParams {
		claim("param", n)
	}
	for _, n := range p.SessionParams {
		claim("session param", n)
	}
	if c.NetNS {
		claim("netns", "of the runs")
	}
	for _, m := range c.Mounts {
		if !filepath.IsAbs(m.Source) || !filepath.IsAbs(m.Target) || filepath.Clean(m.Target) != m.Target || m.Target == "/" {
			errs = append(errs, fmt.Errorf("plugin %s: mount %s -> %s: BUG: source and target must be clean absolute paths", p.Name, m.Source, m.Target))
			continue
		}
		for _, t := range coreMounts {
			if nested(m.Target, t) {
				errs = append(errs, fmt.Errorf("%w: the %s plugin's mount target %s collides with the core's %s", ErrConflict, p.Name, m.Target, t))
			}
		}
		for key, other := range l.owners {
			if t, ok := strings.CutPrefix(key, "mount "); ok && nested(m.Target, t) {
				errs = append(errs, fmt.Errorf("%w: the %s plugin and %s both contribute the mount target %s (or one inside the other's, %s): enable only one of them", ErrConflict, p.Name, owner(other), m.Target, t))
			}
		}
		l.owners["mount "+m.Target] = p.Name
	}
	if len(c.Prefix) > 0 && !filepath.IsAbs(c.Prefix[0]) {
		errs = append(errs, fmt.Errorf("plugin %s: command prefix %q: BUG: it must start with an absolute path", p.Name, c.Prefix))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	l.extra.Prefix = append(l.extra.Prefix, c.Prefix...)
	if len(c.Env) > 0 && l.extra.Env == nil {
		l.extra.Env = map[string]string{}
	}
	maps.Copy(l.extra.Env, c.Env)
	l.extra.Mounts = append(l.extra.Mounts, c.Mounts...)
	return nil
}

func owner(name string) string {
	if name == "the core" {
		return name
	}
	return "the " + name + " plugin"
}

func kindWord(kind string) string {
	switch kind {
	case "env":
		return "environment variable"
	case "param":
		return "process.start param"
	case "session param":
		return "session.create param"
	case "netns":
		return "network namespace"
	}
	return kind
}

// nested reports whether a and b are the same path or one is inside the other.
func nested(a, b string) bool {
	return a == b || strings.HasPrefix(a, b+"/") || strings.HasPrefix(b, a+"/")
}

// Close closes the open plugins in reverse load order, each once, and returns their errors.
func (h *Loaded) Close() error {
	var errs []error
	for i := len(h.open) - 1; i >= 0; i-- {
		o := h.open[i]
		if o.c.Close != nil {
			if err := o.c.Close(); err != nil {
				errs = append(errs, fmt.Errorf("close the %s plugin: %w", o.Name, err))
			}
		}
	}
	h.open = nil
	return errors.Join(errs...)
}

// Extra is what the open plugins add to every run: their prefixes in load order (outermost
// first), their environment and their mounts. The caller may append to the copy it gets.
func (h *Loaded) Extra() tracked.Extra {
	return tracked.Extra{Prefix: slices.Clone(h.extra.Prefix), Env: maps.Clone(h.extra.Env), Mounts: slices.Clone(h.extra.Mounts)}
}

// Actions are the open plugins' actions, by name.
func (h *Loaded) Actions() map[string]Action {
	out := map[string]Action{}
	for _, o := range h.open {
		maps.Copy(out, o.c.Actions)
	}
	return out
}

// Info describes a known plugin for system.info.
type Info struct {
	Manifest
	Installed bool
	Enabled   bool
	Flag      string
}

// Describe lists every known plugin, in load order, as system.info reports it.
func Describe(known []Plugin) []Info {
	out := make([]Info, 0, len(known))
	for _, p := range known {
		out = append(out, Info{Manifest: p.Manifest, Installed: p.Open != nil, Enabled: p.Enabled, Flag: p.Flag})
	}
	return out
}

// TakeStartParams removes from params (a process.start's params object) those the plugins own and
// returns them by plugin. A param owned by a plugin that is known but not enabled is refused,
// naming the plugin and how to enable it.
func (l *Loaded) TakeStartParams(params map[string]json.RawMessage) (map[string]map[string]json.RawMessage, error) {
	return l.take(params, func(p Plugin) []string { return p.StartParams })
}

// TakeSessionParams does the same for a session.create's params (Plugin.SessionParams).
func (l *Loaded) TakeSessionParams(params map[string]json.RawMessage) (map[string]map[string]json.RawMessage, error) {
	return l.take(params, func(p Plugin) []string { return p.SessionParams })
}

func (l *Loaded) take(params map[string]json.RawMessage, owned func(Plugin) []string) (map[string]map[string]json.RawMessage, error) {
	var out map[string]map[string]json.RawMessage
	for _, p := range l.known {
		for _, name := range owned(p) {
			raw, ok := params[name]
			if !ok {
				continue
			}
			if !p.Enabled {
				return nil, rpc.Errorf(rpc.CodeInvalidParams, "params."+name, "params.%s belongs to the %s plugin, which this daemon does not run: %s or leave it out",
					name, p.Name, enableHint(p))
			}
			if out == nil {
				out = map[string]map[string]json.RawMessage{}
			}
			if out[p.Name] == nil {
				out[p.Name] = map[string]json.RawMessage{}
			}
			out[p.Name][name] = raw
			delete(params, name)
		}
	}
	return out, nil
}

func enableHint(p Plugin) string {
	if p.Open == nil {
		return fmt.Sprintf("start the daemon with %s (the image needs plugins = [%q] on the daemon)", p.Flag, p.Name)
	}
	return "start the daemon with " + p.Flag
}

// Run is what the open plugins add to one run, from their Run: its hooks (in load order), the
// per-run environment and the network namespace, and Undo, which reverts what the plugins did if
// the run does not start after all.
type Run struct {
	Hooks []tracked.Hook
	Env   map[string]string
	NetNS *os.File
	Undo  func()
}

// StartRun lets every open plugin with a Run take part in one process.start, in load order. When
// a plugin refuses the run, what the ones before it did is undone and its error returned.
func (l *Loaded) StartRun(ctx context.Context, base RunStart, params map[string]map[string]json.RawMessage) (Run, error) {
	var run Run
	var undo []func()
	undoAll := func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}
	run.Undo = undoAll
	for _, o := range l.open {
		if o.c.Run == nil {
			continue
		}
		r := &RunStart{AgentID: base.AgentID, SessionID: base.SessionID, Managed: base.Managed, Params: params[o.Name],
			Argv: base.Argv, Env: base.Env,
			runEnv: o.c.RunEnv, mayNS: o.c.NetNS}
		hook, err := o.c.Run(ctx, r)
		undo = append(undo, r.undo...)
		if err != nil {
			undoAll()
			return Run{}, err
		}
		if hook != nil {
			run.Hooks = append(run.Hooks, tracked.Hook{Name: o.Name, Observer: observer{hook}, Frozen: o.c.Frozen})
		}
		if len(r.env) > 0 && run.Env == nil {
			run.Env = map[string]string{}
		}
		maps.Copy(run.Env, r.env)
		if r.netns != nil {
			run.NetNS = r.netns
		}
	}
	return run, nil
}

// CreateSession lets every open plugin with SessionHooks.Create take part in one session.create,
// in load order, once the session exists. When one fails, every plugin is told the session is gone
// (Deleted) before the error is returned; the caller removes the session itself.
func (l *Loaded) CreateSession(ctx context.Context, agent, session string, params map[string]map[string]json.RawMessage) error {
	for _, o := range l.open {
		if o.c.Sessions == nil || o.c.Sessions.Create == nil {
			continue
		}
		if err := o.c.Sessions.Create(ctx, SessionStart{AgentID: agent, SessionID: session, Params: params[o.Name]}); err != nil {
			return errors.Join(err, l.SessionDeleted(agent, session))
		}
	}
	return nil
}

// SessionDeleted tells every open plugin, in reverse load order, that a session is gone; it
// returns their errors.
func (l *Loaded) SessionDeleted(agent, session string) error {
	var errs []error
	for i := len(l.open) - 1; i >= 0; i-- {
		o := l.open[i]
		if o.c.Sessions == nil || o.c.Sessions.Deleted == nil {
			continue
		}
		if err := o.c.Sessions.Deleted(agent, session); err != nil {
			errs = append(errs, fmt.Errorf("the %s plugin: %w", o.Name, err))
		}
	}
	return errors.Join(errs...)
}

// SessionInfo is what the open plugins report on one session, by plugin name (nil: nothing).
func (l *Loaded) SessionInfo(agent, session string) map[string]json.RawMessage {
	var out map[string]json.RawMessage
	for _, o := range l.open {
		if o.c.Sessions == nil || o.c.Sessions.Info == nil {
			continue
		}
		if info := o.c.Sessions.Info(agent, session); info != nil {
			if out == nil {
				out = map[string]json.RawMessage{}
			}
			out[o.Name] = info
		}
	}
	return out
}

// observer adapts a RunHook to tracked.Observer.
type observer struct{ RunHook }

func (o observer) Residue(st *tracked.Status) error {
	if r, ok := o.RunHook.(ResidueHook); ok {
		return r.Residue(st)
	}
	return nil
}
