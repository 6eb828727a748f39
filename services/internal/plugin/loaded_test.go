package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/allox-os/allox/internal/rpc"
	"github.com/allox-os/allox/services/internal/tracked"
)

// fake returns an enabled plugin that contributes c and logs its open and close into log.
func fake(name string, c Contribution, log *[]string) Plugin {
	return Plugin{Manifest: Manifest{Name: name, API: APIVersion, Version: "1.0.0"}, Flag: "--" + name, Enabled: true,
		Open: func(context.Context, Core) (*Contribution, error) {
			*log = append(*log, "open "+name)
			cc := c
			cc.Close = func() error { *log = append(*log, "close "+name); return nil }
			return &cc, nil
		}}
}

func deps(t *testing.T) Deps {
	return Deps{State: t.TempDir(), Actions: []string{"session.create"}, Env: []string{"HOME"}, Mounts: []string{"/run/allox/session.sock"}, StartParams: []string{"argv"}}
}

func noop(context.Context, *Call) (any, error) { return nil, nil }

// TestConflictsRefused checks that two contributions of the same name, by two plugins or by a
// plugin and the core, are refused at start with a message naming both, and that the plugins
// already open are closed in reverse order.
func TestConflictsRefused(t *testing.T) {
	for _, c := range []struct {
		name   string
		a, b   Contribution
		params []string
		want   string
	}{
		{name: "action", a: Contribution{Actions: map[string]Action{"x.do": {Handler: noop}}}, b: Contribution{Actions: map[string]Action{"x.do": {Handler: noop}}},
			want: "the beta plugin and the alpha plugin both contribute the action x.do"},
		{name: "env", a: Contribution{Env: map[string]string{"X": "1"}}, b: Contribution{Env: map[string]string{"X": "2"}},
			want: "the beta plugin and the alpha plugin both contribute the environment variable X"},
		{name: "mount", a: Contribution{Mounts: []tracked.Mount{{Source: "/a", Target: "/run/x"}}}, b: Contribution{Mounts: []tracked.Mount{{Source: "/b", Target: "/run/x"}}},
			want: "the beta plugin and the alpha plugin both contribute the mount target /run/x"},
		{name: "nested mount", a: Contribution{Mounts: []tracked.Mount{{Source: "/a", Target: "/run/x"}}}, b: Contribution{Mounts: []tracked.Mount{{Source: "/b", Target: "/run/x/y"}}},
			want: "the beta plugin and the alpha plugin both contribute the mount target /run/x/y"},
		{name: "core action", b: Contribution{Actions: map[string]Action{"session.create": {Handler: noop}}},
			want: "the beta plugin and the core both contribute the action session.create"},
		{name: "core env", b: Contribution{Env: map[string]string{"HOME": "/"}},
			want: "the beta plugin and the core both contribute the environment variable HOME"},
		{name: "core mount", b: Contribution{Mounts: []tracked.Mount{{Source: "/b", Target: "/run/allox/session.sock"}}},
			want: "the beta plugin's mount target /run/allox/session.sock collides with the core's"},
		{name: "param", params: []string{"argv"}, want: "the beta plugin and the core both contribute the process.start param argv"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var log []string
			a, b := fake("alpha", c.a, &log), fake("beta", c.b, &log)
			b.StartParams = c.params
			_, err := Open(context.Background(), deps(t), []Plugin{a, b})
			if !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Open = %v, want a conflict saying %q", err, c.want)
			}
			if diff := cmp.Diff([]string{"open alpha", "open beta", "close beta", "close alpha"}, log); diff != "" {
				t.Errorf("open/close order (-want +got):\n%s", diff)
			}
		})
	}
}

// TestVersionRefused checks that a plugin built for another API version is refused naming both
// versions, before any plugin opens.
func TestVersionRefused(t *testing.T) {
	var log []string
	a, b := fake("alpha", Contribution{}, &log), fake("beta", Contribution{}, &log)
	b.API = 2
	_, err := Open(context.Background(), deps(t), []Plugin{a, b})
	if !errors.Is(err, ErrVersion) || !strings.Contains(err.Error(), "Plugin API v2") || !strings.Contains(err.Error(), "Plugin API v1") || !strings.Contains(err.Error(), "beta") {
		t.Fatalf("Open = %v, want the version refusal naming beta, v2 and v1", err)
	}
	if len(log) != 0 {
		t.Errorf("plugins opened before the version check: %v", log)
	}
}

// TestCloseOrder checks the fixed open order, the reverse close order at shutdown, that a disabled
// plugin is never opened, and that a failed open closes the ones already open in reverse order.
func TestCloseOrder(t *testing.T) {
	var log []string
	a, b, c := fake("alpha", Contribution{}, &log), fake("beta", Contribution{}, &log), fake("gamma", Contribution{}, &log)
	b.Enabled = false
	h, err := Open(context.Background(), deps(t), []Plugin{a, b, c})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"open alpha", "open gamma", "close gamma", "close alpha"}, log); diff != "" {
		t.Errorf("at shutdown (-want +got):\n%s", diff)
	}

	log = nil
	b.Enabled = true
	boom := errors.New("no BTF")
	c.Open = func(context.Context, Core) (*Contribution, error) { log = append(log, "open gamma"); return nil, boom }
	_, err = Open(context.Background(), deps(t), []Plugin{a, b, c})
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "--gamma: open the gamma plugin") {
		t.Fatalf("Open = %v, want gamma's error, naming its flag", err)
	}
	if diff := cmp.Diff([]string{"open alpha", "open beta", "open gamma", "close beta", "close alpha"}, log); diff != "" {
		t.Errorf("after a failed open (-want +got):\n%s", diff)
	}
}

// TestNotInstalled checks that enabling a plugin that is not linked in names the spec line.
func TestNotInstalled(t *testing.T) {
	p := Plugin{Manifest: Manifest{Name: "system-effects", API: APIVersion}, Flag: "--observer", Enabled: true}
	_, err := Open(context.Background(), deps(t), []Plugin{p})
	if !errors.Is(err, ErrNotInstalled) || !strings.Contains(err.Error(), `--observer`) || !strings.Contains(err.Error(), `plugins = ["system-effects"]`) {
		t.Fatalf("Open = %v, want the not-installed refusal naming the flag and the spec line", err)
	}
}

// TestMerge checks what the open plugins add to every run: prefixes in load order, env, mounts,
// and the process.start params routed to their owners (refused for a disabled one).
func TestMerge(t *testing.T) {
	var log []string
	a := fake("alpha", Contribution{Prefix: []string{"/a", "-x"}, Env: map[string]string{"A": "1"}, Mounts: []tracked.Mount{{Source: "/s", Target: "/run/a", ReadOnly: true}}}, &log)
	a.StartParams = []string{"alpha_opt"}
	b := fake("beta", Contribution{Prefix: []string{"/b"}, Env: map[string]string{"B": "2"}}, &log)
	off := Plugin{Manifest: Manifest{Name: "off", API: APIVersion}, Flag: "--off", StartParams: []string{"off_opt"}}
	h, err := Open(context.Background(), deps(t), []Plugin{a, b, off})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	want := tracked.Extra{Prefix: []string{"/a", "-x", "/b"}, Env: map[string]string{"A": "1", "B": "2"}, Mounts: []tracked.Mount{{Source: "/s", Target: "/run/a", ReadOnly: true}}}
	if diff := cmp.Diff(want, h.Extra()); diff != "" {
		t.Errorf("Extra (-want +got):\n%s", diff)
	}
	params := map[string]json.RawMessage{"argv": json.RawMessage(`["x"]`), "alpha_opt": json.RawMessage(`true`)}
	owned, err := h.TakeStartParams(params)
	if err != nil {
		t.Fatal(err)
	}
	if string(owned["alpha"]["alpha_opt"]) != "true" || len(params) != 1 {
		t.Errorf("owned = %v, left = %v: want alpha_opt moved to alpha", owned, params)
	}
	_, err = h.TakeStartParams(map[string]json.RawMessage{"off_opt": json.RawMessage(`1`)})
	var re *rpc.Error
	if !errors.As(err, &re) || re.Field != "params.off_opt" || !strings.Contains(re.Message, "--off") {
		t.Errorf("a disabled plugin's param = %v, want refused naming params.off_opt and --off", err)
	}
}

// TestPerRunAndSessionContributions checks what a plugin adds per run (its declared RunEnv and a
// network namespace) and its part in the sessions' life: session.create params routed to it, a
// failed Create telling every plugin the session is gone, Info by plugin name.
func TestPerRunAndSessionContributions(t *testing.T) {
	var log []string
	var created []string
	netPlugin := fake("net", Contribution{RunEnv: []string{"HTTPS_PROXY"}, NetNS: true,
		Run: func(_ context.Context, r *RunStart) (RunHook, error) {
			if r.SessionID == "proxied" {
				if err := r.SetEnv("HTTPS_PROXY", "http://127.0.0.1:3128"); err != nil {
					return nil, err
				}
			}
			if err := r.SetEnv("UNDECLARED", "x"); err == nil {
				t.Error("SetEnv of an undeclared variable succeeded")
			}
			return nil, r.SetNetNS(os.Stdin)
		},
		Sessions: &SessionHooks{
			Create: func(_ context.Context, s SessionStart) error {
				created = append(created, s.SessionID+" "+string(s.Params["network"]))
				return nil
			},
			Info:    func(_, session string) json.RawMessage { return json.RawMessage(`{"mode":"proxy"}`) },
			Deleted: func(_, session string) error { log = append(log, "net forgets "+session); return nil },
		}}, &log)
	netPlugin.SessionParams = []string{"network"}
	failing := fake("later", Contribution{Sessions: &SessionHooks{
		Create:  func(_ context.Context, s SessionStart) error { return errors.New("no room") },
		Deleted: func(_, session string) error { log = append(log, "later forgets "+session); return nil },
	}}, &log)
	h, err := Open(context.Background(), deps(t), []Plugin{netPlugin, failing})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()

	run, err := h.StartRun(context.Background(), RunStart{AgentID: "a", SessionID: "proxied"}, nil)
	if err != nil || run.Env["HTTPS_PROXY"] != "http://127.0.0.1:3128" || run.NetNS != os.Stdin {
		t.Errorf("StartRun = %+v, %v: want the run's env and netns", run, err)
	}
	params := map[string]json.RawMessage{"network": json.RawMessage(`"proxy"`), "agent_id": json.RawMessage(`"a"`)}
	owned, err := h.TakeSessionParams(params)
	if err != nil || len(params) != 1 {
		t.Fatalf("TakeSessionParams = %v, %v (left %v)", owned, err, params)
	}
	log = nil
	err = h.CreateSession(context.Background(), "a", "s", owned)
	if err == nil || !strings.Contains(err.Error(), "no room") {
		t.Fatalf("CreateSession = %v, want the later plugin's error", err)
	}
	if diff := cmp.Diff([]string{`s "proxy"`}, created); diff != "" {
		t.Errorf("Create calls (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"later forgets s", "net forgets s"}, log); diff != "" {
		t.Errorf("after a failed create (-want +got):\n%s", diff)
	}
	if got := h.SessionInfo("a", "s"); string(got["net"]) != `{"mode":"proxy"}` || len(got) != 1 {
		t.Errorf("SessionInfo = %v", got)
	}

	// Two plugins that both start runs in namespaces of their own are refused.
	other := fake("other-net", Contribution{NetNS: true}, &log)
	_, err = Open(context.Background(), deps(t), []Plugin{fake("net2", Contribution{NetNS: true}, &log), other})
	if !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "network namespace") {
		t.Errorf("two NetNS plugins = %v, want a conflict", err)
	}
}
