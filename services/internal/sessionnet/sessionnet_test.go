package sessionnet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/allox-os/allox/internal/rpc"
	"github.com/allox-os/allox/services/internal/plugin"
)

// fakeNS keeps "namespaces" as plain files: the logic under test is which the plugin makes,
// enters and removes (the real namespaces are services/internal/netns's tests).
type fakeNS struct {
	mu      sync.Mutex
	created []string
	removed []string
	listens int
}

func (f *fakeNS) Create(path string) error {
	f.mu.Lock()
	f.created = append(f.created, path)
	f.mu.Unlock()
	return os.WriteFile(path, []byte("ns"), 0o600)
}

func (f *fakeNS) Open(path string) (*os.File, error) { return os.Open(path) }

func (f *fakeNS) Remove(path string) error {
	f.mu.Lock()
	f.removed = append(f.removed, path)
	f.mu.Unlock()
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

func (f *fakeNS) RemoveAll(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := f.Remove(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

func (f *fakeNS) Listen(ns *os.File, network, addr string) (net.Listener, error) {
	if ns == nil || addr != ProxyAddr {
		return nil, errors.New("fake: listen outside a namespace or not on the proxy's address")
	}
	f.mu.Lock()
	f.listens++
	f.mu.Unlock()
	return net.Listen(network, "127.0.0.1:0") // the test's own loopback stands in for the namespace's
}

// fakeBroker records what it serves and echoes connects.
type fakeBroker struct {
	mu        sync.Mutex
	served    map[key]chan struct{}
	closed    []key
	connected []string
	reloadErr error
	reloads   chan struct{}
}

func (b *fakeBroker) Serve(ctx context.Context, agent, session string, ln net.Listener) error {
	stop := make(chan struct{})
	b.mu.Lock()
	if b.served == nil {
		b.served = map[key]chan struct{}{}
	}
	b.served[key{agent, session}] = stop
	b.mu.Unlock()
	defer ln.Close()
	select {
	case <-stop:
	case <-ctx.Done():
	}
	return nil
}

func (b *fakeBroker) Close(agent, session string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = append(b.closed, key{agent, session})
	if stop, ok := b.served[key{agent, session}]; ok {
		close(stop)
		delete(b.served, key{agent, session})
	}
}

// Dial refuses host "denied.test" as the policy would, and otherwise echoes what it relays.
func (b *fakeBroker) Dial(_ context.Context, agent, session, _, host string, port uint16) (Tunnel, error) {
	if host == "denied.test" {
		return nil, fmt.Errorf("%w: by policy:3", ErrDenied)
	}
	b.mu.Lock()
	b.connected = append(b.connected, agent+"/"+session+" "+net.JoinHostPort(host, strconv.Itoa(int(port))))
	b.mu.Unlock()
	return echoTunnel{}, nil
}

type echoTunnel struct{}

func (echoTunnel) Relay(stream io.ReadWriteCloser) { io.Copy(stream, stream); stream.Close() }
func (echoTunnel) Close()                          {}

func (b *fakeBroker) Reload() error {
	b.mu.Lock()
	reloads, err := b.reloads, b.reloadErr
	b.mu.Unlock()
	if reloads != nil {
		reloads <- struct{}{}
	}
	return err
}
func (b *fakeBroker) Audit(q AuditQuery) (any, error) { return q, nil }

type rig struct {
	t      *testing.T
	state  string
	ns     *fakeNS
	broker *fakeBroker
	loaded *plugin.Loaded
	c      *plugin.Contribution
}

// newRig opens the plugin through the real plugin.Loaded, with fakes for its two components.
func newRig(t *testing.T, state string, cfg Config) *rig {
	t.Helper()
	r := &rig{t: t, state: state, ns: &fakeNS{}, broker: &fakeBroker{}}
	open, err := New(cfg, r.ns, r.broker)
	if err != nil {
		t.Fatal(err)
	}
	p := plugin.Plugin{Manifest: plugin.Manifest{Name: Name, API: plugin.APIVersion, Version: Version},
		Flag: "--session-network proxy", Enabled: true, SessionParams: SessionParams,
		Open: func(ctx context.Context, core plugin.Core) (*plugin.Contribution, error) {
			c, err := open(ctx, core)
			r.c = c
			return c, err
		}}
	if r.loaded, err = plugin.Open(context.Background(), plugin.Deps{State: state}, []plugin.Plugin{p}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.loaded.Close() })
	return r
}

func (r *rig) create(agent, session string, params string) error {
	all := map[string]json.RawMessage{}
	if params != "" {
		if err := json.Unmarshal([]byte(params), &all); err != nil {
			r.t.Fatal(err)
		}
	}
	owned, err := r.loaded.TakeSessionParams(all)
	if err != nil {
		return err
	}
	return r.loaded.CreateSession(context.Background(), agent, session, owned)
}

func (r *rig) mode(agent, session string) string {
	info := r.loaded.SessionInfo(agent, session)
	var m struct{ Mode string }
	if err := json.Unmarshal(info[Name], &m); err != nil {
		r.t.Fatalf("session info %s: %v", info[Name], err)
	}
	return m.Mode
}

func (r *rig) start(agent, session string) plugin.Run {
	r.t.Helper()
	run, err := r.loaded.StartRun(context.Background(), plugin.RunStart{AgentID: agent, SessionID: session}, nil)
	if err != nil {
		r.t.Fatalf("start a run of %s/%s: %v", agent, session, err)
	}
	return run
}

func TestSessionModeChoice(t *testing.T) {
	for _, tc := range []struct {
		name, params string
		allowed      []Mode
		want         string // the mode session.get reports, or the error's text
		wantChoices  []string
	}{
		{name: "default", params: "", want: "proxy"},
		{name: "isolated", params: `{"network": "isolated"}`, want: "isolated"},
		{name: "disabled", params: `{"network": "disabled"}`, want: "disabled"},
		{name: "unknown mode", params: `{"network": "open"}`, want: `params.network "open" is not a network mode`, wantChoices: []string{"disabled", "isolated", "proxy"}},
		{name: "not a string", params: `{"network": 1}`, want: "params.network must be a string"},
		{name: "not allowed", params: `{"network": "disabled"}`, allowed: []Mode{Isolated, Proxy},
			want: `this daemon allows only "isolated", "proxy" (--session-network-modes)`, wantChoices: []string{"isolated", "proxy"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, t.TempDir(), Config{Default: Proxy, Allowed: tc.allowed})
			err := r.create("a", "s", tc.params)
			if strings.Contains(tc.want, " ") { // an error
				var re *rpc.Error
				if !errors.As(err, &re) || re.Field != "params.network" || !strings.Contains(re.Message, tc.want) {
					t.Fatalf("create = %v, want an error on params.network saying %q", err, tc.want)
				}
				if diff := cmp.Diff(tc.wantChoices, re.Choices); diff != "" {
					t.Errorf("choices (-want +got):\n%s", diff)
				}
				if entries, _ := os.ReadDir(filepath.Join(r.state, "plugins", Name, "sessions")); len(entries) != 0 {
					t.Errorf("a failed create left %v in the state", entries)
				}
				if got := r.mode("a", "s"); got != "proxy" {
					t.Errorf("after a failed create the session reports %q, want the default", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := r.mode("a", "s"); got != tc.want {
				t.Errorf("session.get mode = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestSessionModePersists(t *testing.T) {
	state := t.TempDir()
	r := newRig(t, state, Config{Default: Proxy})
	if err := r.create("a", "s1", `{"network": "isolated"}`); err != nil {
		t.Fatal(err)
	}
	if err := r.create("a", "s2", ""); err != nil {
		t.Fatal(err)
	}
	r.loaded.Close()
	// The daemon restarts with another default: the chosen mode stays, the default follows the flag.
	r2 := newRig(t, state, Config{Default: Isolated})
	if got := r2.mode("a", "s1"); got != "isolated" {
		t.Errorf("after a restart s1 = %q, want its chosen isolated", got)
	}
	if got := r2.mode("a", "s2"); got != "isolated" {
		t.Errorf("after a restart s2 = %q, want the new default isolated", got)
	}
	if err := r2.loaded.SessionDeleted("a", "s1"); err != nil {
		t.Fatal(err)
	}
	r3 := newRig(t, state, Config{Default: Proxy})
	if got := r3.mode("a", "s1"); got != "proxy" {
		t.Errorf("a deleted session's mode came back: %q", got)
	}
}

func TestRunPerMode(t *testing.T) {
	r := newRig(t, t.TempDir(), Config{Default: Proxy})
	for s, m := range map[string]string{"off": "disabled", "iso": "isolated", "px": "proxy"} {
		if err := r.create("a", s, `{"network": "`+m+`"}`); err != nil {
			t.Fatal(err)
		}
	}

	off := r.start("a", "off")
	if off.NetNS != nil || off.Env != nil || off.Hooks != nil {
		t.Errorf("a disabled session's run got %+v, want nothing at all", off)
	}

	iso := r.start("a", "iso")
	if iso.NetNS == nil || iso.Env != nil || len(iso.Hooks) != 1 {
		t.Errorf("an isolated session's run got netns %v, env %v, hooks %d; want its namespace only", iso.NetNS, iso.Env, len(iso.Hooks))
	}
	iso.Undo()

	px := r.start("a", "px")
	want := map[string]string{
		"HTTP_PROXY": "http://127.0.0.1:3128", "HTTPS_PROXY": "http://127.0.0.1:3128",
		"http_proxy": "http://127.0.0.1:3128", "https_proxy": "http://127.0.0.1:3128",
		"NO_PROXY": "localhost,127.0.0.1,::1", "no_proxy": "localhost,127.0.0.1,::1",
	}
	if diff := cmp.Diff(want, px.Env); diff != "" {
		t.Errorf("a proxy session's run env (-want +got):\n%s", diff)
	}
	if px.NetNS == nil {
		t.Fatal("a proxy session's run has no namespace")
	}
	meta, err := px.Hooks[0].Observer.Begin(nil)
	if err != nil || string(meta) != `{"mode":"proxy"}` {
		t.Errorf("Begin = %s, %v", meta, err)
	}
	if _, err := px.NetNS.Stat(); err == nil {
		t.Error("the namespace descriptor is still open after Begin")
	}
	px2 := r.start("a", "px")
	px2.Undo()

	// One namespace per session, made at its first run and reused; one proxy listener.
	dir := filepath.Join(r.state, "plugins", Name, "netns")
	if len(r.ns.created) != 2 || !slices.Contains(r.ns.created, filepath.Join(dir, key{"a", "iso"}.hash())) ||
		!slices.Contains(r.ns.created, filepath.Join(dir, key{"a", "px"}.hash())) {
		t.Errorf("namespaces made: %v, want one for iso and one for px", r.ns.created)
	}
	if r.ns.listens != 1 {
		t.Errorf("proxy listeners opened: %d, want 1 for the proxy session's two runs", r.ns.listens)
	}
	waitServed(t, r.broker, key{"a", "px"})
}

func waitServed(t *testing.T, b *fakeBroker, k key) {
	t.Helper()
	for range 1000 {
		b.mu.Lock()
		_, ok := b.served[k]
		b.mu.Unlock()
		if ok {
			return
		}
		<-timeAfter()
	}
	t.Fatalf("the broker never served %v", k)
}

func TestDeletedAndRecovery(t *testing.T) {
	state := t.TempDir()
	r := newRig(t, state, Config{Default: Proxy})
	if err := r.create("a", "s", ""); err != nil {
		t.Fatal(err)
	}
	r.start("a", "s").Undo()
	waitServed(t, r.broker, key{"a", "s"})
	path := filepath.Join(state, "plugins", Name, "netns", key{"a", "s"}.hash())
	if _, err := os.Stat(path); err != nil {
		t.Fatal(err)
	}
	if err := r.loaded.SessionDeleted("a", "s"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the deleted session's namespace is still kept: %v", err)
	}
	if !slices.Contains(r.broker.closed, key{"a", "s"}) {
		t.Errorf("the deleted session's proxy was not closed: %v", r.broker.closed)
	}
	if err := r.loaded.SessionDeleted("a", "never"); err != nil {
		t.Errorf("Deleted of a session the plugin never saw: %v", err)
	}

	// A daemon that died left a namespace: the next start removes it.
	leftover := filepath.Join(state, "plugins", Name, "netns", "0123")
	if err := os.WriteFile(leftover, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	newRig(t, state, Config{Default: Proxy})
	if _, err := os.Stat(leftover); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the namespace a dead daemon left survived the start: %v", err)
	}
}

func TestConnect(t *testing.T) {
	r := newRig(t, t.TempDir(), Config{Default: Isolated})
	if err := r.create("a", "px", `{"network": "proxy"}`); err != nil {
		t.Fatal(err)
	}
	connect := r.c.Actions[ActionConnect]
	if !connect.Stream || connect.Scope != plugin.ScopeSession {
		t.Fatalf("network.connect is %+v, want a session-socket stream action", connect)
	}
	call := func(params string) (any, error) {
		return connect.Handler(context.Background(), &plugin.Call{Action: ActionConnect, Params: json.RawMessage(params), Origin: plugin.Session, Upgrade: true})
	}
	for _, tc := range []struct{ params, field, text string }{
		{`{"agent_id":"a","session_id":"iso","host":"example.com","port":22}`, "session_id", `has network mode "isolated": network connect needs mode "proxy"`},
		{`{"agent_id":"a","session_id":"px","port":22}`, "params.host", "params.host is required"},
		{`{"agent_id":"a","session_id":"px","host":"h","port":70000}`, "params.port", "params.port 70000"},
		// Denied before the stream is switched: the call's error, which the client prints.
		{`{"agent_id":"a","session_id":"px","host":"denied.test","port":22}`, "params.host", "denied by the network policy: by policy:3"},
	} {
		_, err := call(tc.params)
		var re *rpc.Error
		if !errors.As(err, &re) || re.Field != tc.field || !strings.Contains(re.Message, tc.text) {
			t.Errorf("connect %s = %v, want an error on %s saying %q", tc.params, err, tc.field, tc.text)
		}
	}
	res, err := call(`{"agent_id":"a","session_id":"px","host":"example.com","port":22}`)
	if err != nil {
		t.Fatal(err)
	}
	relay, ok := res.(plugin.Relay)
	if !ok {
		t.Fatalf("connect returned %T, want a plugin.Relay", res)
	}
	client, server := net.Pipe()
	done := make(chan error, 1)
	go func() { done <- relay(server) }()
	if _, err := client.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(client, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("relayed %q, %v", buf, err)
	}
	client.Close()
	<-done
	if diff := cmp.Diff([]string{"a/px example.com:22"}, r.broker.connected); diff != "" {
		t.Errorf("broker connects (-want +got):\n%s", diff)
	}
}

func TestReloadAndAudit(t *testing.T) {
	r := newRig(t, t.TempDir(), Config{Default: Proxy, Policy: "/etc/allox/session-network/policy"})
	reload := r.c.Actions[ActionReload].Handler
	if _, err := reload(context.Background(), &plugin.Call{}); err != nil {
		t.Errorf("reload = %v", err)
	}
	r.broker.reloadErr = errors.New("network policy: /etc/allox/session-network/policy:3: unknown verb")
	_, err := reload(context.Background(), &plugin.Call{})
	if err == nil || !strings.Contains(err.Error(), "policy:3: unknown verb") || !strings.Contains(err.Error(), "the policy in force is kept") {
		t.Errorf("a failed reload = %v, want the file:line and that the policy is kept", err)
	}
	audit := r.c.Actions[ActionAudit]
	if !audit.ReadOnly || audit.Scope != 0 {
		t.Errorf("network.audit is %+v, want a read-only control-listener action", audit)
	}
	got, err := audit.Handler(context.Background(), &plugin.Call{Params: json.RawMessage(`{"agent_id":"a","offset":5,"limit":10}`)})
	if diff := cmp.Diff(AuditQuery{AgentID: "a", Offset: 5, Limit: 10}, got); err != nil || diff != "" {
		t.Errorf("audit query (-want +got):\n%s %v", diff, err)
	}
	_, err = audit.Handler(context.Background(), &plugin.Call{Params: json.RawMessage(`{"session_id":"s"}`)})
	if re := (*rpc.Error)(nil); !errors.As(err, &re) || re.Field != "params.agent_id" {
		t.Errorf("audit of a session without its agent = %v", err)
	}
}

func TestConfig(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Default: "open"}, `--session-network: "open" is not a network mode`},
		{Config{Default: Disabled}, "--session-network disabled"},
		{Config{Default: Proxy, Allowed: []Mode{Isolated}}, `--session-network-modes "isolated" does not hold the default mode "proxy"`},
	} {
		if _, err := New(tc.cfg, &fakeNS{}, &fakeBroker{}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want %q", tc.cfg, err, tc.want)
		}
	}
	if _, err := ParseModes("proxy,proxy"); err == nil {
		t.Error("a mode listed twice was accepted")
	}
}

func timeAfter() <-chan time.Time { return time.After(time.Millisecond) }

// SIGHUP reloads the policy while the plugin is open, and no longer once it is closed.
func TestReloadOnSIGHUP(t *testing.T) {
	r := newRig(t, t.TempDir(), Config{Default: Proxy, HUP: true})
	r.broker.mu.Lock()
	r.broker.reloads = make(chan struct{}, 1)
	r.broker.mu.Unlock()
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	select {
	case <-r.broker.reloads:
	case <-time.After(10 * time.Second):
		t.Fatal("SIGHUP did not reload the policy")
	}
	if err := r.loaded.Close(); err != nil {
		t.Fatal(err)
	}
}
