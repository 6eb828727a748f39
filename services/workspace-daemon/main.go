// Command allox-workspace-daemon is the guest's trusted control service: it serves the RPC API
// (POST /v1/rpc) on a loopback listener and, when the host provided a token, on an authenticated
// host-facing listener.
//
//	allox-workspace-daemon --root /var/lib/allox/workspaces --listen 127.0.0.1:8092 \
//		[--listen-host 0.0.0.0:8093 --token-file /run/allox/rpc-token]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/allox-os/allox/services/internal/audit"
	"github.com/allox-os/allox/services/internal/daemon"
	"github.com/allox-os/allox/services/internal/fence"
	"github.com/allox-os/allox/services/internal/netguard"
	"github.com/allox-os/allox/services/internal/plugin"
	"github.com/allox-os/allox/services/internal/seccomp"
	"github.com/allox-os/allox/services/internal/store"
	"github.com/allox-os/allox/services/internal/system"
	"github.com/allox-os/allox/services/internal/tracked"
	"github.com/allox-os/allox/services/internal/tracker"
	"github.com/allox-os/allox/services/internal/workspace"
)

// version is set at build time with -ldflags "-X main.version=...".
var version string

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	switch {
	case errors.Is(err, daemon.ErrUsage):
		fmt.Fprintf(os.Stderr, "allox-workspace-daemon: %v\n", err)
		os.Exit(2)
	case err != nil:
		fmt.Fprintf(os.Stderr, "allox-workspace-daemon: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := daemon.ParseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	return serve(ctx, cfg, knownPlugins(cfg), stderr)
}

// serve runs the daemon with the plugins it knows (tests add their own).
func serve(ctx context.Context, cfg daemon.Config, known []plugin.Plugin, stderr io.Writer) (err error) {
	plugins, err := plugin.New(known)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(stderr, nil)).With("component", "workspace-daemon")
	// The listeners' ports are the daemon's from the first moment, before the store opens.
	ls, err := daemon.Listen(cfg)
	if err != nil {
		return err
	}
	defer ls.Close()
	router := daemon.NewRouter()
	var ws *workspace.Service
	sys := system.New(cfg.Root, system.BuildVersion(version))
	if !cfg.SystemOnly {
		if ws, err = openWorkspace(cfg); err != nil {
			return fmt.Errorf("workspace runtime: %w (--system-only serves system.* without it)", err)
		}
		defer ws.Close()
		if sys.Sandbox, err = guardRuns(cfg, ws, ls.Ports()); err != nil {
			return err
		}
		if err := ws.RemoveStale(); err != nil { // a leftover never stops the daemon
			log.LogAttrs(ctx, slog.LevelWarn, "leftovers of deleted sessions not removed", slog.String("error", err.Error()))
		}
		sys.Quarantined = quarantined(ws)
		for _, q := range sys.Quarantined() {
			log.LogAttrs(ctx, slog.LevelWarn, "session quarantined: its recovery could not finish; only session.delete is served for it",
				slog.String("agent_id", q.AgentID), slog.String("session_id", q.SessionID), slog.String("reason", q.Reason))
		}
		if cfg.ManagedExecution {
			log.LogAttrs(ctx, slog.LevelWarn, "MANAGED EXECUTION ENABLED: process.start with managed: true runs unsandboxed, as root; the VM is its only boundary",
				slog.String("fix", "drop managed_execution from the image spec's sandbox block unless agents must change the system under the observer"))
		}
	}
	// Domains and plugins register here, explicitly: the core's actions first, then the enabled
	// plugins open in load order (refusing what collides with the core's or each other's) and
	// register theirs; they are closed in reverse order when the daemon stops.
	if err := daemon.RegisterSystemWith(router, sys, ws, plugin.Describe(known)); err != nil {
		return err
	}
	if ws != nil {
		socks, err := daemon.OpenSessionSockets(ctx, cfg, router, log)
		if err != nil {
			return err
		}
		defer socks.Close()
		if err := daemon.RegisterWorkspace(router, ws, plugins, socks); err != nil {
			return err
		}
		router.SetAudit(ws.AuditLog())
		if err := registerTracker(cfg, router, ws); err != nil {
			return err
		}
		deps := plugin.Deps{Workspace: ws, State: cfg.State, Log: log, Actions: router.Actions(),
			Env: coreRunEnv, Mounts: coreMounts(cfg), StartParams: daemon.StartParamNames()}
		if err := plugins.Open(ctx, deps); err != nil {
			return err
		}
		defer func() {
			if cerr := plugins.Close(); cerr != nil {
				err = errors.Join(err, cerr)
			}
		}()
		if err := daemon.RegisterPlugins(router, plugins); err != nil {
			return err
		}
	}
	log.Info("starting", "version", system.BuildVersion(version), "root", cfg.Root, "actions", router.Actions())
	return daemon.Serve(ctx, ls, router, log)
}

// guardRuns attaches the network guard to the runs' parent cgroup, so that no process of any run
// can connect to, send to or bind the daemon's ports (or --guard-ports) on any address, and
// returns the boundary as system.info reports it. The guard stays attached after the daemon
// exits (and is replaced by the next start), so a run cannot take a port while it restarts.
func guardRuns(cfg daemon.Config, ws *workspace.Service, ports []uint16) (system.Sandbox, error) {
	ports = append(ports, cfg.GuardPorts...)
	g, err := netguard.Attach(ws.RunsParentDir(), ports)
	if err != nil {
		return system.Sandbox{}, fmt.Errorf("network guard of the runs: %w", err)
	}
	defer g.Close()
	uid, gid := ws.RunIdentity()
	sb := system.Sandbox{RunUID: uid, RunGID: gid, GuardedPorts: g.Ports(), ManagedExecution: cfg.ManagedExecution}
	for _, r := range seccomp.Rules() {
		if r.Action == seccomp.Allow {
			continue
		}
		row := system.SeccompRule{Syscall: r.Syscall, Number: r.Number(), When: r.When(), Errno: r.Action.String()}
		for _, a := range r.Args {
			row.Args = append(row.Args, system.SeccompArg{Index: a.Index, Op: a.Op.String(), Value: a.Value})
		}
		sb.Seccomp = append(sb.Seccomp, row)
	}
	return sb, nil
}

// openWorkspace builds the workspace runtime: the Btrfs store (recovering any interrupted rollback
// first), tracked execution, fences and the turn policy, all keeping their state in cfg.State.
func openWorkspace(cfg daemon.Config) (*workspace.Service, error) {
	// A rollback returns before the old current/ is deleted: evicting a large, recently read
	// workspace's inodes is done afterwards, at the lowest priority.
	st, err := store.OpenWith(cfg.Root, cfg.State, store.DeleteInBackground)
	if err != nil {
		return nil, err
	}
	var quota *workspace.Quota
	if cfg.QuotasOn() {
		qc := store.QuotaConfig{Session: cfg.SessionQuota, Agent: cfg.AgentQuota, Reserve: cfg.StoreReserve}
		if err := st.EnableQuota(qc); err != nil {
			st.Close()
			return nil, fmt.Errorf("--session-quota/--agent-quota/--store-reserve: %w", err)
		}
		quota = &workspace.Quota{Session: cfg.SessionQuota, MaxSession: cfg.MaxSessionQuota}
	}
	// The state dir is the daemon's alone (0700): runs' private /tmp are staged in their sessions'
	// .run-tmp/, which is where bwrap, already the runs' uid, has to reach.
	if err := os.Chmod(cfg.State, 0o700); err != nil {
		return nil, fmt.Errorf("state dir: %w", err)
	}
	log := &audit.Log{Dir: cfg.State}
	limits, err := workspace.OpenLimits(cfg.State, cfg.SessionLimits, cfg.MaxLimits)
	if err != nil {
		return nil, err
	}
	runs, err := tracked.NewManager(tracked.Config{CgroupParent: cfg.CgroupParent, Bwrap: cfg.Bwrap,
		RecordsDir: filepath.Join(cfg.State, "runs"), AllowManaged: cfg.ManagedExecution,
		RunUID: uint32(cfg.RunUID), RunGID: uint32(cfg.RunGID), Retention: cfg.RunRecords, Notify: auditRun(log),
		RunLimits: cfg.RunLimits, SessionLimits: limits.Session, RunsMemoryReserve: cfg.RunsMemoryReserve})
	if err != nil {
		return nil, err
	}
	fences, err := fence.Open(cfg.State)
	if err != nil {
		return nil, err
	}
	policy, err := workspace.OpenPolicy(cfg.State)
	if err != nil {
		return nil, err
	}
	policy.SetDefault(cfg.TurnCheckpoints)
	turns, err := workspace.OpenTurnLog(cfg.State)
	if err != nil {
		return nil, err
	}
	return workspace.New(workspace.Deps{Store: st, Runs: runs, Fences: fences, Policy: policy, Turns: turns, Limits: limits, Quota: quota, Audit: log, KillOnRollback: cfg.KillOnRollback}), nil
}

// auditRun records what happens to runs without a request (their exit, the pruning of their
// records) in the audit log.
func auditRun(log *audit.Log) func(string, *tracked.Status) {
	return func(event string, st *tracked.Status) {
		detail := st.State
		if st.State != tracked.StateRunning {
			detail += " exit_code=" + strconv.Itoa(st.ExitCode)
		}
		if st.Reason != "" {
			detail += ": " + st.Reason
		}
		_ = log.Append(audit.Entry{Action: event, AgentID: st.AgentID, SessionID: st.SessionID, RunID: st.RunID,
			Origin: audit.Daemon, Outcome: audit.OK, Detail: detail})
	}
}

// quarantined reports the store's quarantined sessions to system.info.
func quarantined(ws *workspace.Service) func() []system.Quarantined {
	return func() []system.Quarantined {
		var out []system.Quarantined
		for _, q := range ws.Quarantined() {
			out = append(out, system.Quarantined{AgentID: q.AgentID, SessionID: q.SessionID, Reason: q.Reason, Since: q.Since})
		}
		return out
	}
}

// coreRunEnv are the variables the core sets in every run, which no plugin may contribute.
var coreRunEnv = []string{"HOME", "PATH", "TMPDIR", "ALLOX_AGENT_WORKSPACE", "ALLOX_AGENT_SHARED", daemon.SessionSocketEnv}

// coreMounts are the places of a run's sandbox that are the core's: no plugin mount may be one of
// them or nest with one.
func coreMounts(cfg daemon.Config) []string {
	return []string{"/proc", "/dev", "/tmp", "/usr", "/bin", "/sbin", "/lib", "/lib64", "/etc", cfg.Root, cfg.State,
		"/run/allox/session.sock", "/run/allox/bin", "/run/allox/share.py", "/run/allox/network.py"}
}

// registerTracker registers process.tree and process.events in the core unless the eBPF
// process-tree plugin serves them: from the session's cgroup (live processes only) with
// --process-tracker, else answering which flag enables them.
func registerTracker(cfg daemon.Config, router *daemon.Router, ws *workspace.Service) error {
	switch {
	case cfg.ProcessTreeProvider == daemon.ProviderEBPF:
		return nil
	case cfg.ProcessTracker:
		return daemon.RegisterTracker(router, ws, tracker.New(ws))
	}
	return daemon.RegisterTrackerDisabled(router)
}
