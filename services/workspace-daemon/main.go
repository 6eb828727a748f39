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
	if cfg.ProcessTreeProvider == daemon.ProviderEBPF && openProcessTree == nil {
		return fmt.Errorf("--process-tree-provider=ebpf: %w", errProviderNotInstalled)
	}
	if cfg.Observer && openObserver == nil {
		return fmt.Errorf("--observer: %w", errObserverNotInstalled)
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
		if sys.Sandbox, err = guardRuns(cfg, ws.Runs, ls.Ports()); err != nil {
			return err
		}
		if err := ws.RemoveStale(); err != nil { // a leftover never stops the daemon
			log.LogAttrs(ctx, slog.LevelWarn, "leftovers of deleted sessions not removed", slog.String("error", err.Error()))
		}
		sys.Quarantined = quarantined(ws.Store)
		for _, q := range sys.Quarantined() {
			log.LogAttrs(ctx, slog.LevelWarn, "session quarantined: its recovery could not finish; only session.delete is served for it",
				slog.String("agent_id", q.AgentID), slog.String("session_id", q.SessionID), slog.String("reason", q.Reason))
		}
		if cfg.ManagedExecution {
			log.LogAttrs(ctx, slog.LevelWarn, "MANAGED EXECUTION ENABLED: process.start with managed: true runs unsandboxed, as root; the VM is its only boundary",
				slog.String("fix", "drop managed_execution from the image spec's sandbox block unless agents must change the system under the observer"))
		}
	}
	// Domains and plugins register here, explicitly.
	if err := daemon.RegisterSystemWith(router, sys, ws); err != nil {
		return err
	}
	if ws != nil {
		var hook daemon.RunHook
		if cfg.Observer {
			if hook, err = openObserver(cfg, ws, router); err != nil {
				return fmt.Errorf("--observer: %w", err)
			}
			if c, ok := hook.(interface{ Close() }); ok {
				defer c.Close() // its standby observer
			}
		}
		socks, err := daemon.OpenSessionSockets(ctx, cfg, router, log)
		if err != nil {
			return err
		}
		defer socks.Close()
		if err := daemon.RegisterWorkspace(router, ws, hook, socks); err != nil {
			return err
		}
		router.SetAudit(ws.Audit)
		tr, err := openTracker(cfg, ws)
		if err != nil {
			return err
		}
		if tr != nil {
			defer tr.Close()
			err = daemon.RegisterTracker(router, ws, tr)
		} else {
			err = daemon.RegisterTrackerDisabled(router)
		}
		if err != nil {
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
func guardRuns(cfg daemon.Config, runs *tracked.Manager, ports []uint16) (system.Sandbox, error) {
	ports = append(ports, cfg.GuardPorts...)
	g, err := netguard.Attach(runs.ParentDir(), ports)
	if err != nil {
		return system.Sandbox{}, fmt.Errorf("network guard of the runs: %w", err)
	}
	defer g.Close()
	uid, gid := runs.Identity()
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
	return &workspace.Service{Store: st, Runs: runs, Fences: fences, Policy: policy, Limits: limits, Quota: quota, Audit: log, KillOnRollback: cfg.KillOnRollback}, nil
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
func quarantined(st *store.Store) func() []system.Quarantined {
	return func() []system.Quarantined {
		var out []system.Quarantined
		for _, q := range st.Quarantined() {
			out = append(out, system.Quarantined{AgentID: q.AgentID, SessionID: q.SessionID, Reason: q.Reason, Since: q.Since})
		}
		return out
	}
}

// errObserverNotInstalled refuses --observer in a daemon built without the system-effects plugin.
var errObserverNotInstalled = errors.New(`the system-effects observer is not installed in this image: ` +
	`add plugins = ["system-effects"] to the daemon's service block in the image spec`)

// errProviderNotInstalled refuses --process-tree-provider=ebpf in a daemon built without the plugin.
var errProviderNotInstalled = errors.New(`the eBPF process-tree provider is not installed in this image: ` +
	`add plugins = ["process-tree"] to the daemon's service block in the image spec`)

// openTracker returns the process tracker asked for by --process-tracker (nil without it). With
// --process-tree-provider=ebpf it loads the eBPF collector and refuses to go on if that fails: the
// provider was asked for, so the daemon must not run without it. The observer and the eBPF provider
// are never loaded together (daemon.Config.Validate refuses both).
func openTracker(cfg daemon.Config, ws *workspace.Service) (*tracker.Tracker, error) {
	if !cfg.ProcessTracker {
		return nil, nil
	}
	if cfg.ProcessTreeProvider != daemon.ProviderEBPF {
		return tracker.New(ws.Runs), nil
	}
	col, err := openProcessTree()
	if err != nil {
		return nil, fmt.Errorf("--process-tree-provider=ebpf: load the eBPF process-tree provider (needs root and kernel BTF): %w", err)
	}
	tr, err := tracker.NewEBPF(ws.Runs, col, filepath.Join(cfg.State, "proctree"))
	if err != nil {
		col.Close()
		return nil, fmt.Errorf("--process-tree-provider=ebpf: %w", err)
	}
	return tr, nil
}
