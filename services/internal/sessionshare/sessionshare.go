// Package sessionshare is the session-share plugin (Plugin API v1): a session opts in to share a
// directory of its current/ with the other sessions that opted in, read-only or read-write, and
// those read (and, where allowed, write) its files through the daemon — never through a mount,
// so that nothing of one session's workspace appears in another's runs, and every access is
// decided and audited here. The wire protocol (actions, params, replies and the two byte
// streams) is in shareproto, which the client implements.
//
// Semantics:
//   - Off by default. share.enable (scope: a directory of current/, "" for all of it, e.g.
//     "output"; permission read or write) makes the caller's scope visible to every other
//     session that shares; a session that has not enabled cannot read the others either.
//   - share.disable refuses every new request at once, in both directions. A transfer already
//     streaming (read or write) finishes: it was decided when it started, and its file is open.
//   - A read or a write holds the target's lease (workspace.Service.Lease) from its decision to
//     the end of its stream: a session.rollback of the target waits for it (bounded: a transfer
//     is bounded by its size limit and by the idle timeout on its stream). While a rollback of the
//     target is in progress, share access to it is refused ("target busy", conflict).
//   - A write is refused while the target has a live run (a run could be writing the same files).
//     A run that starts while a write streams does not stop it; the rename is atomic either way.
//   - The share state of each session lives in the plugin's state dir (outside every workspace),
//     one file per session: it survives a daemon restart and a rollback of the session itself;
//     the deletion of the session drops it.
//
// Safety: every path is resolved beneath the target's scope with openat2(RESOLVE_BENEATH |
// RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS) and O_NOFOLLOW, so that "..", absolute paths and
// symlinks (any component, also one swapped in during the request) are refused by the kernel at
// the open; files are opened O_NONBLOCK and then fstat'ed, so that a FIFO, socket or device is
// refused without blocking; a regular file with more than one link is refused (a hard link can
// name a file outside the scope). A write goes to an O_EXCL temporary file in the target's
// directory, owned by the runs' uid/gid, renamed (renameat in that directory's fd) over the name
// once complete. Every access — who, target, path, bytes, decision, reason — is one JSON line of
// State/audit/share.jsonl, rotated like the daemon's audit log.
package sessionshare

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/allox-os/allox/internal/atomicfile"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/allox-os/allox/services/internal/plugin"
	"github.com/allox-os/allox/services/internal/sessionshare/shareproto"
)

// Name is the plugin's name, as the image spec spells it; Version its version.
const (
	Name    = "session-share"
	Version = "1"
)

// Defaults of Config.
const (
	DefaultMaxRead  = 1 << 30
	DefaultMaxWrite = 1 << 30
	DefaultIdle     = 30 * time.Second
)

// Config bounds the transfers. Zero values are the defaults.
type Config struct {
	MaxRead  int64         // the largest file share.read streams
	MaxWrite int64         // the largest share.write
	Idle     time.Duration // a stream that moves no byte for this long is cut (its lease released)
}

// Workspace is what the plugin needs of the workspace service (*workspace.Service).
type Workspace interface {
	SessionPaths(agent, session string) (current, shared, agentWorkspace string, err error)
	Lease(agent, session string) (func(), error)
	ActiveRuns(agent, session string) int
	RunIdentity() (uid, gid uint32)
}

// Plugin is the session-share plugin opened over its state dir.
type Plugin struct {
	cfg   Config
	ws    Workspace
	state string
	log   *slog.Logger
	audit auditLog

	mu       sync.Mutex
	sessions map[key]record
}

type key struct{ agent, session string }

func (k key) String() string { return k.agent + "/" + k.session }

// hash names a session's state file.
func (k key) hash() string { return plugin.SessionRef{AgentID: k.agent, SessionID: k.session}.Hash() }

// record is a session's share state, as kept in its file.
type record struct {
	AgentID    string `json:"agent_id"`
	SessionID  string `json:"session_id"`
	Scope      string `json:"scope"`
	Permission string `json:"permission"`
}

// New returns the plugin's Open, for plugin.Plugin.Open, over core.Workspace.
func New(cfg Config) func(context.Context, plugin.Core) (*plugin.Contribution, error) {
	return func(_ context.Context, core plugin.Core) (*plugin.Contribution, error) {
		if core.Workspace == nil {
			return nil, errors.New("BUG: the session-share plugin needs the workspace service")
		}
		p, err := Open(cfg, core.Workspace, core.State, core.Log)
		if err != nil {
			return nil, err
		}
		return p.Contribution(), nil
	}
}

// Open opens the plugin over ws with its state in state (made if missing).
func Open(cfg Config, ws Workspace, state string, log *slog.Logger) (*Plugin, error) {
	if cfg.MaxRead <= 0 {
		cfg.MaxRead = DefaultMaxRead
	}
	if cfg.MaxWrite <= 0 {
		cfg.MaxWrite = DefaultMaxWrite
	}
	if cfg.Idle <= 0 {
		cfg.Idle = DefaultIdle
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := &Plugin{cfg: cfg, ws: ws, state: state, log: log, audit: auditLog{Dir: filepath.Join(state, "audit")}, sessions: map[key]record{}}
	for _, d := range []string{p.sessionDir(), p.audit.Dir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("session share: %w", err)
		}
	}
	if err := p.load(); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *Plugin) sessionDir() string { return filepath.Join(p.state, "sessions") }

// AuditDir is where the plugin's audit lives (share.jsonl and its rotations).
func (p *Plugin) AuditDir() string { return p.audit.Dir }

// Contribution is what the plugin adds to the daemon.
func (p *Plugin) Contribution() *plugin.Contribution {
	return &plugin.Contribution{
		Actions:  p.actions(),
		Sessions: &plugin.SessionHooks{Info: p.info, Deleted: p.deleted},
	}
}

// load reads every session's state file.
func (p *Plugin) load() error {
	ents, err := os.ReadDir(p.sessionDir())
	if err != nil {
		return fmt.Errorf("session share: %w", err)
	}
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		path := filepath.Join(p.sessionDir(), e.Name())
		b, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("session share: %w", err)
		}
		var r record
		if err := json.Unmarshal(b, &r); err != nil || r.AgentID == "" || r.SessionID == "" || checkScope(r.Scope) != nil ||
			(r.Permission != shareproto.Read && r.Permission != shareproto.Write) {
			return fmt.Errorf("session share: %s: not a share state file (%v): remove it to drop that session's share", path, err)
		}
		p.sessions[key{r.AgentID, r.SessionID}] = r
	}
	return nil
}

// save writes k's state file (atomically), or removes it when r is nil.
func (p *Plugin) save(k key, r *record) error {
	path := filepath.Join(p.sessionDir(), k.hash()+".json")
	if r == nil {
		return atomicfile.Remove(path)
	}
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return atomicfile.Write(path, b, 0o600)
}

func (p *Plugin) get(k key) (record, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	r, ok := p.sessions[k]
	return r, ok
}

// info is the share state in session.get's reply (nil when the session does not share).
func (p *Plugin) info(agent, session string) json.RawMessage {
	r, ok := p.get(key{agent, session})
	if !ok {
		return nil
	}
	b, _ := json.Marshal(shareproto.State{Enabled: true, Scope: r.Scope, Permission: r.Permission})
	return b
}

// deleted drops a deleted session's share state.
func (p *Plugin) deleted(agent, session string) error {
	k := key{agent, session}
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.sessions, k)
	return p.save(k, nil)
}

// peers are the sessions that share, but k.
func (p *Plugin) peers(k key) []shareproto.Peer {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []shareproto.Peer
	for o, r := range p.sessions {
		if o != k {
			out = append(out, shareproto.Peer{Target: o.String(), Scope: r.Scope, Permission: r.Permission})
		}
	}
	slices.SortFunc(out, func(a, b shareproto.Peer) int { return strings.Compare(a.Target, b.Target) })
	return out
}
