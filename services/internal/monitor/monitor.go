// Package monitor is the monitor plugin (Plugin API v1): agent observation and profiling, enabled
// with the daemon's --monitor-root. It takes events in two ways, both per session and identified
// by where they arrive, never by what the sender claims:
//
//   - an OTLP/HTTP receiver (protobuf and JSON; traces, metrics and logs, decoded with the
//     OpenTelemetry project's own protobuf types) for each session, reachable from the session's
//     runs on 127.0.0.1:<port> in whatever network namespace they run: the daemon's own (the
//     session network disabled; the port is the session's alone) or the session's own namespace
//     (isolated, proxy; a listener bound inside it, as the session network's proxy is, so no other
//     session can reach it). Every run gets OTEL_EXPORTER_OTLP_ENDPOINT and
//     OTEL_EXPORTER_OTLP_PROTOCOL, so an OpenTelemetry-instrumented agent reports with no setup;
//   - the actions monitor.span, monitor.event and monitor.metric (control listeners and the session
//     socket: allox monitor span|event|metric) for frameworks without OpenTelemetry.
//
// It associates what it receives: every record with its session and turn (the turn open when the
// span started, from the session's turn history, or an allox.turn_id attribute); every
// process.start with the span that caused it (a W3C traceparent in its params or in its TRACEPARENT
// environment variable, else the open turn), and every run with its resource use (CPU time, peak
// memory, I/O bytes, peak pids) read from its cgroup at its end. Model calls follow the
// OpenTelemetry GenAI semantic conventions (gen_ai.*).
//
// It keeps everything as JSON Lines per session under --monitor-root (outside every workspace),
// bounded by Retention, answers monitor.records, monitor.summary (per session, or across the runs
// of an agent) and monitor.report (one self-contained HTML page per session), and can export what
// it receives and derives to an upstream OTLP endpoint (Exporter, --monitor-export): spans and runs
// as spans with the OpenTelemetry Go SDK's exporter, metric and log exports forwarded as they came,
// all with the session as attributes, queued and never blocking a receiver or a run.
package monitor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/allox-os/allox/services/internal/plugin"
	"github.com/allox-os/allox/services/internal/workspace"
	"google.golang.org/protobuf/proto"
)

// Name is the plugin's name, as the image spec spells it; Version its version.
const (
	Name    = "monitor"
	Version = "1"
)

// StartParams are the process.start params the plugin owns.
var StartParams = []string{"traceparent"}

// The variables every run gets.
const (
	EnvEndpoint = "OTEL_EXPORTER_OTLP_ENDPOINT"
	EnvProtocol = "OTEL_EXPORTER_OTLP_PROTOCOL"
	// Protocol is the one the receiver prefers (it takes http/json too).
	Protocol = "http/protobuf"
)

// Config is the plugin's configuration, from the daemon's flags.
type Config struct {
	// Root is where the journals live (--monitor-root), outside every workspace.
	Root string
	// Retention bounds the journals (zero fields: DefaultRetention's).
	Retention Retention
	// Export, if set, receives a copy of every record (see NewExporter); it must not block.
	Export Exporter
}

// Exporter sends records upstream; Export and Forward must return at once (queue or drop).
type Exporter interface {
	Export(recs []Record)
	// Forward sends an OTLP metrics or logs export a session's receiver took (path /v1/metrics or
	// /v1/logs), which is the exporter's from then on.
	Forward(path, agent, session string, req proto.Message)
	Shutdown(ctx context.Context) error
}

// Turns is what the monitor needs of the workspace: a session's turn history.
type Turns interface {
	Turns(agent, session string) ([]workspace.Turn, error)
}

// Listen opens a listener inside a network namespace (services/internal/netns.Listen).
type Listen func(ns *os.File, network, addr string) (net.Listener, error)

type key struct{ agent, session string }

// Monitor is the open plugin.
type Monitor struct {
	cfg     Config
	turns   Turns
	listen  Listen
	journal *journal
	log     *slog.Logger
	ownNS   uint64 // the daemon's network namespace (inode)

	mu       sync.Mutex
	sessions map[key]*endpoint
	closed   bool
}

// endpoint is one session's receiver: its port, reserved in the daemon's namespace by a socket
// bound to it (not listening, so it refuses connections: no other session gets the port, and
// nobody reaches the session there before its runs do), and its listeners, by network namespace.
type endpoint struct {
	port     int
	starting int                     // runs that took the port and have not begun (nor failed) yet
	reserve  *os.File                // the bound socket, until it listens (a run in the daemon's namespace)
	servers  map[uint64]*http.Server // by namespace inode
}

// Open opens the monitor over turns (the workspace) with listen for namespaces.
func Open(cfg Config, turns Turns, listen Listen, log *slog.Logger) (*Monitor, error) {
	if cfg.Root == "" {
		return nil, errors.New("--monitor-root: name the directory for the monitor's journals, outside every workspace, e.g. /var/lib/allox/monitor")
	}
	if cfg.Retention.SessionBytes <= 0 {
		cfg.Retention.SessionBytes = DefaultRetention.SessionBytes
	}
	if cfg.Retention.Sessions <= 0 {
		cfg.Retention.Sessions = DefaultRetention.Sessions
	}
	if err := os.MkdirAll(cfg.Root, 0o700); err != nil {
		return nil, fmt.Errorf("--monitor-root %s: %w", cfg.Root, err)
	}
	own, err := nsInode("/proc/self/ns/net")
	if err != nil {
		return nil, fmt.Errorf("monitor: the daemon's network namespace: %w", err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Monitor{cfg: cfg, turns: turns, listen: listen, log: log, ownNS: own,
		journal:  &journal{root: cfg.Root, ret: cfg.Retention, size: map[string]int64{}},
		sessions: map[key]*endpoint{}}, nil
}

func nsInode(path string) (uint64, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return 0, err
	}
	return fi.Sys().(*syscall.Stat_t).Ino, nil
}

// Contribution is what the plugin adds to the daemon.
func (m *Monitor) Contribution() *plugin.Contribution {
	return &plugin.Contribution{
		Run:      m.run,
		RunEnv:   []string{EnvEndpoint, EnvProtocol},
		Actions:  m.actions(),
		Sessions: &plugin.SessionHooks{Deleted: m.deleted, Info: m.info},
		Close:    m.Close,
	}
}

// port returns the session's receiver port for a run that is starting, reserving one at the
// session's first run; the run calls started once it has begun or failed.
func (m *Monitor) port(k key) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return 0, errors.New("monitor: closed")
	}
	ep, ok := m.sessions[k]
	if !ok {
		f, port, err := reservePort()
		if err != nil {
			return 0, fmt.Errorf("monitor: reserve the session's OTLP port: %w", err)
		}
		ep = &endpoint{port: port, reserve: f, servers: map[uint64]*http.Server{}}
		m.sessions[k] = ep
	}
	ep.starting++
	return ep.port, nil
}

// started says a run that took the session's port has begun, or failed to start. When the last
// starting run failed and none listens yet (the session's first process.start failed: an unknown
// session, a refused request), the reservation is released: nothing was made for it.
func (m *Monitor) started(k key, failed bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ep, ok := m.sessions[k]
	if !ok {
		return
	}
	ep.starting--
	if failed && ep.starting == 0 && len(ep.servers) == 0 {
		ep.close()
		delete(m.sessions, k)
	}
}

// serve serves the session's receiver on ln (m.mu held).
func (m *Monitor) serve(k key, ep *endpoint, ns uint64, ln net.Listener) {
	srv := &http.Server{Handler: receiver{m: m, key: k}, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	ep.servers[ns] = srv
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			m.log.Warn("monitor: a session's OTLP receiver stopped", "agent_id", k.agent, "session_id", k.session, "error", err.Error())
		}
	}()
}

// enterNS makes sure the session's receiver listens on its port inside the network namespace of
// process pid (a run's, before its command is released): in the daemon's namespace on the
// reserved socket, serving only connections made by processes of the session's cgroup tree at
// group (sessionListener), or inside the session's own namespace (the session network's isolated
// and proxy modes), where its runs reach it and nobody else does; the reservation in the daemon's
// namespace then stays unlistened.
func (m *Monitor) enterNS(k key, pid int, group string) error {
	path := fmt.Sprintf("/proc/%d/ns/net", pid)
	ino, err := nsInode(path)
	if err != nil {
		return fmt.Errorf("monitor: the run's network namespace: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	ep, ok := m.sessions[k]
	if !ok || ep.servers[ino] != nil {
		return nil
	}
	if ino == m.ownNS {
		if ep.reserve == nil {
			return errors.New("BUG: monitor: the session's reserved port is gone")
		}
		if group == "" {
			return errors.New("BUG: monitor: a run in the daemon's namespace without its session's cgroup")
		}
		ln, err := listenReserved(ep.reserve)
		if err != nil {
			return fmt.Errorf("monitor: the session's OTLP receiver on port %d: %w", ep.port, err)
		}
		ep.reserve = nil
		m.serve(k, ep, ino, sessionListener{Listener: ln, group: group})
		return nil
	}
	ns, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("monitor: the run's network namespace: %w", err)
	}
	defer ns.Close()
	ln, err := m.listen(ns, "tcp", fmt.Sprintf("127.0.0.1:%d", ep.port))
	if err != nil {
		return fmt.Errorf("monitor: the session's OTLP receiver in its network namespace: %w", err)
	}
	m.serve(k, ep, ino, ln)
	return nil
}

// info is what session.get reports under plugins.monitor: the endpoint the session's runs get,
// once its first run has made it.
func (m *Monitor) info(agent, session string) json.RawMessage {
	m.mu.Lock()
	defer m.mu.Unlock()
	ep, ok := m.sessions[key{agent, session}]
	if !ok {
		return nil
	}
	out, _ := json.Marshal(map[string]string{"otlp_endpoint": "http://127.0.0.1:" + strconv.Itoa(ep.port)})
	return out
}

// deleted closes a deleted session's receiver; its journal stays for the agent's summary (within
// the retention).
func (m *Monitor) deleted(agent, session string) error {
	m.mu.Lock()
	ep := m.sessions[key{agent, session}]
	delete(m.sessions, key{agent, session})
	m.mu.Unlock()
	if ep != nil {
		ep.close()
	}
	return nil
}

func (ep *endpoint) close() {
	for _, srv := range ep.servers {
		_ = srv.Close()
	}
	if ep.reserve != nil {
		_ = ep.reserve.Close()
	}
}

// Close stops every receiver and the export.
func (m *Monitor) Close() error {
	m.mu.Lock()
	m.closed = true
	eps := m.sessions
	m.sessions = map[key]*endpoint{}
	m.mu.Unlock()
	for _, ep := range eps {
		ep.close()
	}
	if m.cfg.Export != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return m.cfg.Export.Shutdown(ctx)
	}
	return nil
}

// ingest stamps recs with where they arrived and their turn, and keeps them.
func (m *Monitor) ingest(k key, source string, recs []Record) error {
	if len(recs) == 0 {
		return nil
	}
	now := time.Now().UTC()
	turns, _ := m.turns.Turns(k.agent, k.session)
	for i := range recs {
		r := &recs[i]
		r.Source, r.Received, r.AgentID, r.SessionID = source, now, k.agent, k.session
		if r.TurnID == "" && r.Kind != KindRun { // a run's turn is the one open at its start (Begin)
			if t, ok := r.Attrs[attrTurn].(string); ok {
				r.TurnID = t
			} else {
				at := r.Start
				if at.IsZero() {
					at = now
				}
				r.TurnID = turnAt(turns, at)
			}
		}
	}
	if err := m.journal.append(k.agent, k.session, recs); err != nil {
		return err
	}
	if m.cfg.Export != nil {
		m.cfg.Export.Export(recs)
	}
	return nil
}

// turnAt is the turn of turns (oldest first) that was open at t: the latest begun at or before t
// and not ended before it.
func turnAt(turns []workspace.Turn, t time.Time) string {
	for i := len(turns) - 1; i >= 0; i-- {
		tr := turns[i]
		if tr.Begun == nil || tr.Begun.After(t) {
			continue
		}
		if tr.Ended == nil || !tr.Ended.Before(t) {
			return tr.TurnID
		}
	}
	return ""
}
