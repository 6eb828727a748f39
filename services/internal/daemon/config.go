// Package daemon is the workspace daemon's RPC layer: flag parsing, the action registry that the
// core domains and plugins register into, the HTTP endpoint (POST /v1/rpc) with its loopback and
// authenticated host listeners, the one mapping from domain errors to wire errors, and the
// handlers, one file per domain. Domain packages never import it.
package daemon

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/allox-os/allox/internal/limit"
	"github.com/allox-os/allox/services/internal/tracked"
)

// DefaultListen is the loopback listener's default address.
const DefaultListen = "127.0.0.1:8092"

// ErrUsage marks errors in the command line (exit status 2): errors.Is(err, ErrUsage).
var ErrUsage = errors.New("usage error")

type usageError struct{ err error }

func (e usageError) Error() string        { return e.err.Error() }
func (e usageError) Unwrap() error        { return e.err }
func (e usageError) Is(target error) bool { return target == ErrUsage }

// Config is the daemon's command line.
type Config struct {
	// Root is the workspace store; it must exist.
	Root string
	// Listen is the unauthenticated loopback listener; it must be a loopback address.
	Listen string
	// ListenHost is the optional host-facing listener; every request on it needs the bearer token
	// from TokenFile.
	ListenHost string
	TokenFile  string
	// State holds the daemon's own state (checkpoint index, journal, fences, run records), outside
	// every workspace and so outside every rollback; default <Root>/.allox-state.
	State string
	// KillOnRollback is the default of session.rollback's kill_processes.
	KillOnRollback bool
	// TurnCheckpoints turns the Session/Turn checkpoint policy on for every agent and session
	// without a setting of their own (a baseline at session.create, turn-<id> after each
	// successful turn); off by default, as the seed says ("once enabled").
	TurnCheckpoints bool
	// Bwrap is the bubblewrap binary; CgroupParent the cgroup (below the cgroup2 mount) that holds
	// every agent's and session's group.
	Bwrap        string
	CgroupParent string
	// SystemOnly serves only the system.* actions, without the workspace runtime (no Btrfs store,
	// no sandbox): for diagnosing a guest whose store cannot be opened.
	SystemOnly bool
	// ProcessTracker enables process.tree and process.events (answered from the session cgroup, live
	// processes only, unless ProcessTreeProvider is "ebpf").
	ProcessTracker bool
	// ProcessTreeProvider is "" or "ebpf": the eBPF process-tree provider, which records every
	// fork, exec and exit of the runs. It needs ProcessTracker. It and the observer are never
	// loaded together: both hook process lifecycles.
	ProcessTreeProvider string
	// Observer runs every managed execution under the system-effects observer (protocol v2, or v3
	// when process.start asks for recovery). ObserverScope is its optional scope file,
	// ObserverLibexec the directory of its programs and ObserverPins their sha256 pins.
	// ManagedExecution lets process.start ask for managed: true (no bubblewrap; the VM is the only
	// boundary), the seed's migration-period path.
	ManagedExecution bool
	// RunUID and RunGID are the unprivileged identity of every sandboxed run (never root).
	RunUID, RunGID uint
	// GuardPorts are ports of the guest's other trusted services that runs may not reach, beside
	// the daemon's own listeners (always guarded).
	GuardPorts []uint16
	// RunRecords is the retention policy of run records, per session (--run-records-keep,
	// --run-records-max-age, --run-records-max-bytes; default tracked.DefaultRetention).
	RunRecords      tracked.Retention
	Observer        bool
	ObserverScope   string
	ObserverLibexec string
	ObserverPins    string
	// SessionLimits are every session's default limits, RunLimits every run's (capped by its
	// session's), MaxLimits the bound of session.create's overrides; RunsMemoryReserve (bytes) is
	// what all runs together leave to the control plane (the runs' parent group gets memory.max =
	// MemTotal minus it). The image spec's sandbox block renders them.
	SessionLimits, RunLimits, MaxLimits limit.Set
	RunsMemoryReserve                   int64
	// SessionQuota and AgentQuota (bytes) are every session's and agent's space limit on the store,
	// MaxSessionQuota the bound of session.create's quota, StoreReserve what all agents together
	// leave free for the daemon's state. Any of them turns Btrfs simple quotas on. The image
	// spec's sandbox block renders them.
	SessionQuota, AgentQuota, MaxSessionQuota, StoreReserve int64
	// SessionNetwork is the session-network plugin's default mode ("" or "disabled": the plugin
	// is off; "isolated" or "proxy" enable it); SessionNetworkModes the modes session.create may
	// choose (nil: all three); SessionNetworkPolicy the broker's egress policy file, outside
	// every workspace. The image spec's session_network block renders them.
	SessionNetwork       string
	SessionNetworkModes  []string
	SessionNetworkPolicy string
	// ShareTools enables the session-share plugin: sessions that opt in (allox share enable)
	// read, and where granted write, each other's shared directory through the daemon.
	ShareTools bool
	// Dialog enables the dialog plugin: runs ask questions on their session's socket
	// (dialog.ask) that the host side answers (dialog.pending, dialog.answer).
	Dialog bool
	// SessionSockets is the directory of the sessions' own sockets (see SessionSockets), outside
	// every workspace; Client the allox client bound into every sandboxed run with the python
	// shims beside it ("" binds none).
	SessionSockets, Client string
	// MonitorRoot enables the monitor plugin and is where it keeps its journals, outside every
	// workspace; MonitorSessionBytes bounds each session's journal; MonitorExport, if set, is an
	// upstream OTLP/HTTP endpoint that receives a copy of everything (the platform's collector).
	MonitorRoot         string
	MonitorSessionBytes int64
	MonitorExport       string
}

// QuotasOn reports whether the store's space limits are on.
func (c Config) QuotasOn() bool {
	return c.SessionQuota > 0 || c.AgentQuota > 0 || c.MaxSessionQuota > 0 || c.StoreReserve > 0
}

// Where the system-effects plugin's programs and their hash pins are installed in the image.
const (
	DefaultObserverLibexec = "/usr/libexec/allox"
	DefaultObserverPins    = DefaultObserverLibexec + "/system-effects.sha256"
)

// DefaultSessionSockets is the default --session-sockets; DefaultClient, where mkimage installs
// the client (with share.py and network.py beside it), the default --client.
const (
	DefaultSessionSockets = "/run/allox/sessions"
	DefaultClient         = DefaultObserverLibexec + "/allox"
)

// DefaultSessionNetworkPolicy is where the session-network plugin installs its default policy
// (the default --session-network-policy).
const DefaultSessionNetworkPolicy = "/etc/allox/session-network/policy"

// The session network's modes (--session-network, --session-network-modes).
var sessionNetworkModes = []string{"disabled", "isolated", "proxy"}

// SessionNetworkOn reports whether the flags enable the session-network plugin.
func (c Config) SessionNetworkOn() bool {
	return c.SessionNetwork == "isolated" || c.SessionNetwork == "proxy"
}

// ProviderEBPF is the --process-tree-provider value of the eBPF provider.
const ProviderEBPF = "ebpf"

// ParseFlags parses and checks the command line. Flag errors and -h write usage to stderr.
func ParseFlags(args []string, stderr io.Writer) (Config, error) {
	var c Config
	fset := flag.NewFlagSet("allox-workspace-daemon", flag.ContinueOnError)
	fset.SetOutput(stderr)
	fset.StringVar(&c.Root, "root", "", "workspace store directory (required; must exist), e.g. /var/lib/allox/workspaces")
	fset.StringVar(&c.Listen, "listen", DefaultListen, "loopback `address` of the unauthenticated listener")
	fset.StringVar(&c.ListenHost, "listen-host", "", "`address` of the host-facing listener, e.g. 0.0.0.0:8093; needs --token-file")
	fset.StringVar(&c.TokenFile, "token-file", "", "`file` holding the host listener's bearer token (mode 0600); the host listener stays closed while it is missing or empty")
	fset.StringVar(&c.State, "state", "", "`directory` for the daemon's state, outside every workspace (default ROOT/.allox-state)")
	fset.BoolVar(&c.KillOnRollback, "kill-session-processes-on-rollback", false, "session.rollback kills the session's processes unless the request says kill_processes: false")
	fset.BoolVar(&c.TurnCheckpoints, "turn-checkpoints", false, "checkpoint every session at creation (\"baseline\") and after each successful turn (\"turn-<id>\") unless its agent or the session turns it off (agent.update, session.update)")
	fset.StringVar(&c.Bwrap, "bwrap", "bwrap", "bubblewrap `binary` for tracked runs")
	fset.StringVar(&c.CgroupParent, "cgroup-parent", "allox", "cgroup below the cgroup2 mount that holds the agents' and sessions' groups")
	fset.BoolVar(&c.SystemOnly, "system-only", false, "serve only system.* actions, without the workspace runtime")
	fset.BoolVar(&c.ProcessTracker, "process-tracker", false, "enable process.tree and process.events (from the session cgroup: live processes only, unless --process-tree-provider=ebpf)")
	fset.StringVar(&c.ProcessTreeProvider, "process-tree-provider", "", "`provider` of the process tree: \"ebpf\" records every fork, exec and exit of the runs (needs --process-tracker, root and kernel BTF)")
	fset.BoolVar(&c.ManagedExecution, "managed-execution", false, "allow process.start with managed: true: runs without bubblewrap, with the daemon's privileges (the VM is the only boundary)")
	fset.UintVar(&c.RunUID, "run-uid", tracked.DefaultRunID, "unprivileged `uid` of every sandboxed run (not 0)")
	fset.UintVar(&c.RunGID, "run-gid", tracked.DefaultRunID, "unprivileged `gid` of every sandboxed run (not 0)")
	fset.Func("guard-ports", "comma-separated `ports` of other trusted guest services that no run may connect to, send to or bind (the daemon's own are always guarded)", func(v string) error {
		ports, err := parsePorts(v)
		c.GuardPorts = append(c.GuardPorts, ports...)
		return err
	})
	c.RunRecords = tracked.DefaultRetention
	fset.IntVar(&c.RunRecords.MaxRuns, "run-records-keep", c.RunRecords.MaxRuns, "run records kept per session, newest first (live runs are never pruned; 0: no count bound)")
	fset.DurationVar(&c.RunRecords.MaxAge, "run-records-max-age", c.RunRecords.MaxAge, "prune run records that ended longer ago than this `duration` (0: no age bound)")
	fset.Func("run-records-max-bytes", "`size` of the run records kept per session, e.g. 256MiB (0: no size bound; default 256MiB)", func(v string) error {
		n, err := parseSize(v)
		c.RunRecords.MaxBytes = n
		return err
	})
	fset.BoolVar(&c.Dialog, "dialog", false, "enable the dialog plugin: runs ask permission requests and questions on their session's socket, which the host listener's dialog.pending and dialog.answer serve (needs the dialog plugin)")
	fset.BoolVar(&c.ShareTools, "share-tools", false, "enable the session-share plugin: sessions that opt in (allox share enable) read and write each other's shared directory through the daemon (needs the session-share plugin)")
	fset.BoolVar(&c.Observer, "observer", false, "run every process.start under the system-effects observer (needs the system-effects plugin; excludes --process-tree-provider=ebpf)")
	fset.StringVar(&c.ObserverScope, "observer-scope", "", "scope `file` of the observer: domains beyond the Session Workspace and shared/ (needs --observer)")
	fset.StringVar(&c.ObserverLibexec, "observer-libexec", DefaultObserverLibexec, "`directory` of the observer's programs (observe, verifiers, recover)")
	fset.StringVar(&c.ObserverPins, "observer-pins", DefaultObserverPins, "`file` of sha256 pins (sha256sum format) the observer's programs must match")
	limitFlag := func(dst *limit.Set) func(string) error {
		return func(v string) (err error) { *dst, err = limit.Parse(v); return err }
	}
	fset.Func("session-limits", "every session's default `limits`, e.g. pids_max=4096,memory_max=4GiB,memory_swap_max=0,cpu_weight=100", limitFlag(&c.SessionLimits))
	fset.Func("run-limits", "every run's `limits`, capped by its session's, e.g. pids_max=1024,memory_max=2GiB", limitFlag(&c.RunLimits))
	fset.Func("max-limits", "the highest `limits` session.create may ask for, e.g. pids_max=16384,memory_max=16GiB", limitFlag(&c.MaxLimits))
	fset.Func("runs-memory-reserve", "`size` all runs together leave to the control plane: the runs' parent cgroup gets memory.max = MemTotal minus it, e.g. 192MiB", func(v string) (err error) {
		c.RunsMemoryReserve, err = limit.ParseSize(v)
		return err
	})
	sizeFlag := func(dst *int64) func(string) error {
		return func(v string) (err error) { *dst, err = limit.ParseSize(v); return err }
	}
	fset.Func("session-quota", "every session's space `limit` on the store (current/ and its checkpoints), e.g. 8GiB; turns Btrfs simple quotas on", sizeFlag(&c.SessionQuota))
	fset.Func("agent-quota", "every agent's space `limit` on the store (all its sessions), e.g. 32GiB; turns Btrfs simple quotas on", sizeFlag(&c.AgentQuota))
	fset.Func("max-session-quota", "the largest `size` session.create's quota may ask for, e.g. 64GiB (default: --session-quota)", sizeFlag(&c.MaxSessionQuota))
	fset.Func("store-reserve", "`size` all agents together leave free on the store for the daemon's state, e.g. 256MiB; turns Btrfs simple quotas on", sizeFlag(&c.StoreReserve))
	fset.StringVar(&c.SessionNetwork, "session-network", "disabled", "default network `mode` of a session: disabled (the sandbox's own empty network), isolated (one namespace per session, loopback only) or proxy (isolated, plus the broker's proxy on 127.0.0.1:3128); isolated and proxy need the session-network plugin")
	fset.Func("session-network-modes", "comma-separated network `modes` session.create may choose with \"network\" (default: disabled,isolated,proxy)", func(v string) error {
		c.SessionNetworkModes = nil
		for _, m := range strings.Split(v, ",") {
			c.SessionNetworkModes = append(c.SessionNetworkModes, strings.TrimSpace(m))
		}
		return nil
	})
	fset.StringVar(&c.SessionNetworkPolicy, "session-network-policy", DefaultSessionNetworkPolicy, "egress policy `file` of the session network's broker, outside every workspace (reload: SIGHUP or network.reload)")
	fset.StringVar(&c.MonitorRoot, "monitor-root", "", "enable the monitor plugin (OTLP receiver per session, allox monitor, summaries, reports) keeping its journals in this `directory`, outside every workspace, e.g. /var/lib/allox/monitor")
	fset.Func("monitor-session-bytes", "`size` bound of each session's monitor journal, e.g. 32MiB (it keeps at most twice this; default 32MiB)", sizeFlag(&c.MonitorSessionBytes))
	fset.StringVar(&c.MonitorExport, "monitor-export", "", "upstream OTLP/HTTP `endpoint` that receives a copy of everything the monitor records, e.g. http://collector:4318 (needs --monitor-root)")
	fset.StringVar(&c.SessionSockets, "session-sockets", DefaultSessionSockets, "`directory` of the sessions' own sockets, outside every workspace (the daemon makes it 0711 and clears it at start)")
	fset.StringVar(&c.Client, "client", DefaultClient, "the allox client `program` bound at "+ClientTarget+" in every sandboxed run, with share.py and network.py beside it (\"\": bind none)")
	if err := fset.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return c, err
		}
		return c, usageError{err}
	}
	if fset.NArg() > 0 {
		return c, usageError{fmt.Errorf("unexpected argument %q: the daemon takes only flags", fset.Arg(0))}
	}
	if c.State == "" && c.Root != "" {
		c.State = filepath.Join(c.Root, ".allox-state")
	}
	return c, c.Validate()
}

// Validate checks the configuration, naming the flag at fault and how to fix it.
func (c Config) Validate() error {
	var errs []error
	switch fi, err := os.Stat(c.Root); {
	case c.Root == "":
		errs = append(errs, errors.New("--root is required: name the workspace store, e.g. --root /var/lib/allox/workspaces"))
	case err != nil:
		errs = append(errs, fmt.Errorf("--root %s: %w: create the store (or mount it) before starting the daemon", c.Root, err))
	case !fi.IsDir():
		errs = append(errs, fmt.Errorf("--root %s is not a directory", c.Root))
	}
	if err := checkLoopback(c.Listen); err != nil {
		errs = append(errs, err)
	}
	if c.ListenHost != "" {
		if _, _, err := net.SplitHostPort(c.ListenHost); err != nil {
			errs = append(errs, fmt.Errorf("--listen-host %q: %w: use HOST:PORT, e.g. 0.0.0.0:8093", c.ListenHost, err))
		}
		if c.TokenFile == "" {
			errs = append(errs, errors.New("--listen-host needs --token-file: the host listener accepts only requests that carry its bearer token"))
		}
	}
	switch c.ProcessTreeProvider {
	case "":
	case ProviderEBPF:
		if !c.ProcessTracker {
			errs = append(errs, errors.New("--process-tree-provider=ebpf needs --process-tracker: add --process-tracker"))
		}
	default:
		errs = append(errs, fmt.Errorf("--process-tree-provider %q: use \"ebpf\" or leave it empty", c.ProcessTreeProvider))
	}
	if c.Observer && c.ProcessTreeProvider == ProviderEBPF {
		errs = append(errs, errors.New("--observer and --process-tree-provider=ebpf are never loaded together "+
			"(both hook process lifecycles, and the observer records the process history itself): drop one of them"))
	}
	for _, id := range []struct {
		flag string
		v    uint
	}{{"--run-uid", c.RunUID}, {"--run-gid", c.RunGID}} {
		if id.v == 0 || id.v > 1<<31 {
			errs = append(errs, fmt.Errorf("%s %d: a sandboxed run is never root; use an unprivileged id that owns nothing on the guest, e.g. %d", id.flag, id.v, tracked.DefaultRunID))
		}
	}
	if c.RunRecords.MaxRuns < 0 {
		errs = append(errs, fmt.Errorf("--run-records-keep %d: use a count of runs per session, e.g. %d, or 0 for no count bound", c.RunRecords.MaxRuns, tracked.DefaultRetention.MaxRuns))
	}
	if c.RunRecords.MaxAge < 0 {
		errs = append(errs, fmt.Errorf("--run-records-max-age %s: use a positive duration, e.g. %s, or 0 for no age bound", c.RunRecords.MaxAge, tracked.DefaultRetention.MaxAge))
	}
	if c.ObserverScope != "" && !c.Observer {
		errs = append(errs, errors.New("--observer-scope needs --observer: add --observer or drop the scope"))
	}
	errs = append(errs, c.validateSessionNetwork()...)
	errs = append(errs, c.validateLimits()...)
	if !c.SystemOnly {
		errs = append(errs, c.validateSessionSockets()...)
	}
	if err := errors.Join(errs...); err != nil {
		return usageError{err}
	}
	return nil
}

// checkLoopback refuses a --listen address that is not a loopback IP: that listener has no
// authentication.
func checkLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--listen %q: %w: use 127.0.0.1:PORT", addr, err)
	}
	if ip, err := netip.ParseAddr(host); err == nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("--listen %s is not a loopback address, and that listener has no authentication: "+
		"use --listen 127.0.0.1:PORT, and to serve the host use --listen-host %s with --token-file FILE (requests then need the bearer token)", addr, addr)
}

// parseSize parses a byte count: a plain number or one with a KiB, MiB or GiB suffix.
func parseSize(v string) (int64, error) {
	num, mult := strings.TrimSpace(v), int64(1)
	for suffix, m := range map[string]int64{"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30} {
		if n, ok := strings.CutSuffix(num, suffix); ok {
			num, mult = n, m
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("%q is not a size: use bytes or KiB, MiB, GiB, e.g. 256MiB, or 0 for no bound", v)
	}
	return n * mult, nil
}

// parsePorts parses "1024,1025".
func parsePorts(v string) ([]uint16, error) {
	var ports []uint16
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.ParseUint(strings.TrimSpace(f), 10, 16)
		if err != nil || n == 0 {
			return nil, fmt.Errorf("%q is not a port: use numbers from 1 to 65535, e.g. 1024,1025", f)
		}
		ports = append(ports, uint16(n))
	}
	return ports, nil

}

// validateLimits checks each limit flag's ranges and that the defaults stay within --max-limits.
func (c Config) validateLimits() []error {
	var errs []error
	for _, f := range []struct {
		flag string
		set  limit.Set
	}{{"--session-limits", c.SessionLimits}, {"--run-limits", c.RunLimits}, {"--max-limits", c.MaxLimits}} {
		for _, e := range f.set.Check() {
			errs = append(errs, fmt.Errorf("%s %s", f.flag, e))
		}
		if f.flag == "--max-limits" {
			continue
		}
		for _, e := range f.set.Within(c.MaxLimits) {
			errs = append(errs, fmt.Errorf("%s %s of --max-limits: lower the default or raise the maximum", f.flag, e))
		}
	}
	if c.MaxSessionQuota > 0 && c.SessionQuota > c.MaxSessionQuota {
		errs = append(errs, fmt.Errorf("--session-quota %d is above --max-session-quota %d: lower the default or raise the maximum", c.SessionQuota, c.MaxSessionQuota))
	}
	if c.RunsMemoryReserve < 0 {
		errs = append(errs, fmt.Errorf("--runs-memory-reserve %d is negative: give a size such as 192MiB, or 0 for no reserve", c.RunsMemoryReserve))
	}
	return errs
}

// validateSessionSockets checks --session-sockets and --client as paths (OpenSessionSockets
// checks what is on disk).
func (c Config) validateSessionSockets() []error {
	var errs []error
	switch d := c.SessionSockets; {
	case d == "":
		errs = append(errs, fmt.Errorf("--session-sockets is required: name the directory of the sessions' sockets, e.g. --session-sockets %s", DefaultSessionSockets))
	case !filepath.IsAbs(d):
		errs = append(errs, fmt.Errorf("--session-sockets %s: use an absolute path, e.g. %s", d, DefaultSessionSockets))
	case len(filepath.Clean(d))+boundPathLen > maxSocketPath:
		errs = append(errs, fmt.Errorf("--session-sockets %s is %d bytes long: AF_UNIX paths hold at most %d bytes, so use a directory of at most %d bytes, e.g. %s",
			d, len(d), maxSocketPath, maxSocketPath-boundPathLen, DefaultSessionSockets))
	}
	if c.Client != "" && !filepath.IsAbs(c.Client) {
		errs = append(errs, fmt.Errorf("--client %s: use an absolute path, or --client \"\" to bind no client", c.Client))
	}
	return errs
}

// validateSessionNetwork checks the session network's flags.
func (c Config) validateSessionNetwork() []error {
	var errs []error
	if c.SessionNetwork != "" && !slices.Contains(sessionNetworkModes, c.SessionNetwork) {
		errs = append(errs, fmt.Errorf("--session-network %q: use disabled, isolated or proxy", c.SessionNetwork))
	}
	seen := map[string]bool{}
	for _, m := range c.SessionNetworkModes {
		switch {
		case !slices.Contains(sessionNetworkModes, m):
			errs = append(errs, fmt.Errorf("--session-network-modes: %q is not a network mode: list some of disabled, isolated, proxy, e.g. --session-network-modes isolated,proxy", m))
		case seen[m]:
			errs = append(errs, fmt.Errorf("--session-network-modes: %q is listed twice: name each mode once", m))
		}
		seen[m] = true
	}
	switch {
	case c.SessionNetworkModes != nil && !c.SessionNetworkOn():
		errs = append(errs, errors.New("--session-network-modes needs --session-network isolated or proxy: sessions choose a mode only while the plugin is enabled"))
	case c.SessionNetworkModes != nil && slices.Contains(sessionNetworkModes, c.SessionNetwork) && !seen[c.SessionNetwork]:
		errs = append(errs, fmt.Errorf("--session-network-modes %s does not hold the default mode %q (--session-network): add it", strings.Join(c.SessionNetworkModes, ","), c.SessionNetwork))
	}
	switch p := filepath.Clean(c.SessionNetworkPolicy); {
	case !c.SessionNetworkOn():
	case !filepath.IsAbs(p):
		errs = append(errs, fmt.Errorf("--session-network-policy %q: name the policy file by its absolute path, outside every workspace, e.g. %s", c.SessionNetworkPolicy, DefaultSessionNetworkPolicy))
	case c.Root != "" && (p == filepath.Clean(c.Root) || strings.HasPrefix(p, filepath.Clean(c.Root)+"/")):
		errs = append(errs, fmt.Errorf("--session-network-policy %s is inside the workspace store %s (--root): keep the policy outside every workspace, e.g. %s", c.SessionNetworkPolicy, c.Root, DefaultSessionNetworkPolicy))
	}
	switch p := filepath.Clean(c.MonitorRoot); {
	case c.MonitorRoot == "":
		if c.MonitorExport != "" || c.MonitorSessionBytes != 0 {
			errs = append(errs, errors.New("--monitor-export and --monitor-session-bytes need --monitor-root: the monitor is enabled by naming its directory"))
		}
	case !filepath.IsAbs(p):
		errs = append(errs, fmt.Errorf("--monitor-root %q: name the directory by its absolute path, outside every workspace, e.g. /var/lib/allox/monitor", c.MonitorRoot))
	case c.Root != "" && (p == filepath.Clean(c.Root) || strings.HasPrefix(p, filepath.Clean(c.Root)+"/")):
		errs = append(errs, fmt.Errorf("--monitor-root %s is inside the workspace store %s (--root): keep the journals outside every workspace (and so outside every rollback), e.g. /var/lib/allox/monitor", c.MonitorRoot, c.Root))
	}
	if u, err := url.Parse(c.MonitorExport); c.MonitorExport != "" && (err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "") {
		errs = append(errs, fmt.Errorf("--monitor-export %q: name an OTLP/HTTP endpoint, e.g. http://collector:4318", c.MonitorExport))
	}
	return errs
}
