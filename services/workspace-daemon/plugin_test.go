package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/allox-os/allox/internal/daemontest"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/allox-os/allox/internal/rpc"
	"github.com/allox-os/allox/services/internal/daemon"
	"github.com/allox-os/allox/services/internal/plugin"
	"github.com/allox-os/allox/services/internal/tracked"
)

// probeEnv is what the test plugins leave behind, shared by all of them.
type probeEnv struct {
	dir string // traversable by the runs' uid: the plugins' prefixes and mount sources live here
	mu  sync.Mutex
	log []string // opens, closes, hook calls, in order
}

func (e *probeEnv) record(s string) {
	e.mu.Lock()
	e.log = append(e.log, s)
	e.mu.Unlock()
}

func (e *probeEnv) calls() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.log...)
}

func newProbeEnv(t *testing.T) *probeEnv {
	t.Helper()
	dir, err := os.MkdirTemp("", "allox-plugin-probe")
	must(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	must(t, os.Chmod(dir, 0o755))
	must(t, os.Mkdir(filepath.Join(dir, "marks"), 0o777))
	must(t, os.Chmod(filepath.Join(dir, "marks"), 0o777))
	return &probeEnv{dir: dir}
}

// probe is a test plugin (built only in tests) that contributes one of each kind: a command
// prefix that appends its name to marks/order and execs the launch, an environment variable, a
// read-only mount, one action per scope, a run hook whose metadata is what it saw, and a Close.
func (e *probeEnv) probe(t *testing.T, name string) plugin.Plugin {
	t.Helper()
	prefix := filepath.Join(e.dir, name+"-prefix")
	script := fmt.Sprintf("#!/bin/sh\necho %s \"$(id -u)\" >> %s\nexec \"$@\"\n", name, filepath.Join(e.dir, "marks", "order"))
	must(t, os.WriteFile(prefix, []byte(script), 0o755))
	src := filepath.Join(e.dir, name+"-mount")
	must(t, os.Mkdir(src, 0o755))
	must(t, os.WriteFile(filepath.Join(src, "hello"), []byte("mounted by "+name+"\n"), 0o644))
	served := func(_ context.Context, c *plugin.Call) (any, error) {
		return map[string]string{"plugin": name, "origin": c.Origin.String()}, nil
	}
	domain := strings.ReplaceAll(name, "-", "_")
	env := strings.ToUpper("ALLOX_" + domain)
	return plugin.Plugin{Manifest: plugin.Manifest{Name: name, API: plugin.APIVersion, Version: "0.1.0"}, Flag: "--" + name, Enabled: true,
		Open: func(context.Context, plugin.Core) (*plugin.Contribution, error) {
			e.record("open " + name)
			return &plugin.Contribution{
				Prefix: []string{prefix},
				Env:    map[string]string{env: "on"},
				Mounts: []tracked.Mount{{Source: src, Target: "/run/" + name, ReadOnly: true}},
				Actions: map[string]plugin.Action{
					domain + ".control": {Handler: served, ReadOnly: true},
					domain + ".host":    {Handler: served, ReadOnly: true, Scope: plugin.ScopeHost},
					domain + ".session": {Handler: served, ReadOnly: true, Scope: plugin.ScopeSession},
				},
				Run: func(_ context.Context, r *plugin.RunStart) (plugin.RunHook, error) {
					e.record("run " + name + " " + r.SessionID)
					return probeHook{e: e, name: name}, nil
				},
				Close: func() error { e.record("close " + name); return nil },
			}, nil
		}}
}

type probeHook struct {
	e    *probeEnv
	name string
}

func (h probeHook) Begin(st *tracked.Status) (json.RawMessage, error) {
	h.e.record("begin " + h.name)
	return json.Marshal(map[string]any{"begun": true, "bwrap_pid": st.Pid})
}

func (h probeHook) End(st *tracked.Status, quiesce error) (json.RawMessage, error) {
	h.e.record("end " + h.name)
	return json.Marshal(map[string]any{"begun": true, "exit_code": st.ExitCode, "quiesced": quiesce == nil})
}

// inProcess serves the daemon in this process with the plugins given, on a real Btrfs store, with
// a loopback and a host listener. stop cancels it and returns what serve returned.
func inProcess(t testing.TB, root string, known []plugin.Plugin) (loop, host string, token string, stop func() error) {
	t.Helper()
	tokenFile := filepath.Join(t.TempDir(), "token")
	token = "probe-token-0123456789"
	must(t, os.WriteFile(tokenFile, []byte(token), 0o600))
	cfg, err := daemon.ParseFlags(withSessionSockets(t, []string{"--root", root, "--listen", "127.0.0.1:0", "--listen-host", "127.0.0.1:0",
		"--token-file", tokenFile, "--cgroup-parent", testCgroupParent(t, root)}), io.Discard)
	must(t, err)
	pr, pw := io.Pipe()
	addrs := make(chan [2]string, 2)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			t.Log("daemon: " + sc.Text())
			if name, addr, ok := daemontest.Listening(sc.Text()); ok {
				addrs <- [2]string{name, addr}
			}
		}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serve(ctx, cfg, known, pw); pw.Close() }()
	got := map[string]string{}
	for len(got) < 2 {
		select {
		case a := <-addrs:
			got[a[0]] = a[1]
		case err := <-done:
			cancel()
			t.Logf("serve returned before listening: %v", err)
			return "", "", "", func() error { return err }
		case <-time.After(30 * time.Second):
			t.Fatal("the daemon did not listen in 30 s")
		}
	}
	stopped := sync.OnceValue(func() error { cancel(); return <-done })
	t.Cleanup(func() { stopped() })
	return "http://" + got["loopback"], "http://" + got["host"], token, stopped
}

// call posts one action and returns the result or the wire error.
func call(t testing.TB, url, token, action, params string) (json.RawMessage, *rpc.Error) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+rpc.Path, strings.NewReader(`{"action":"`+action+`","params":`+params+`}`))
	must(t, err)
	req.Header.Set("Content-Type", rpc.ContentType)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	must(t, err)
	defer resp.Body.Close()
	var env rpc.Response
	must(t, json.NewDecoder(resp.Body).Decode(&env))
	return env.Result, env.Error
}

// TestPluginContributionsInARealRun checks, on a real store with real bubblewrap, that each kind
// of contribution of two test plugins is merged into a run: both prefixes ran, outermost first and
// as the run's uid; the env is set; the mounts are there, read-only; the hooks ran in order around
// the run and their metadata is in process.get; each action answers on the scope it declared and
// nowhere else; system.info lists the plugins; and the plugins close in reverse order at shutdown.
func TestPluginContributionsInARealRun(t *testing.T) {
	root := btrfsRoot(t)
	e := newProbeEnv(t)
	loop, host, token, stop := inProcess(t, root, []plugin.Plugin{e.probe(t, "probe-a"), e.probe(t, "probe-b")})
	mustPost(t, loop, `{"action":"agent.create","params":{"agent_id":"a"}}`)
	mustPost(t, loop, `{"action":"session.create","params":{"agent_id":"a","session_id":"s"}}`)
	script := `echo "$ALLOX_PROBE_A $ALLOX_PROBE_B"; cat /run/probe-a/hello /run/probe-b/hello; touch /run/probe-a/x 2>/dev/null && echo writable || echo read-only
/run/allox/bin/allox call probe_a.session; /run/allox/bin/allox call probe_a.control 2>&1 | grep -c forbidden; /run/allox/bin/allox call probe_a.host 2>&1 | grep -c forbidden`
	var r rpc.Run
	must(t, json.Unmarshal(mustPost(t, loop, `{"action":"process.start","params":{"agent_id":"a","session_id":"s","argv":["/bin/sh","-c",`+quote(script)+`]}}`), &r))
	must(t, json.Unmarshal(mustPost(t, loop, `{"action":"process.wait","params":{"run_id":"`+r.RunID+`"}}`), &r))
	var out rpc.Output
	must(t, json.Unmarshal(mustPost(t, loop, `{"action":"process.output","params":{"run_id":"`+r.RunID+`"}}`), &out))
	if !exited0(r) {
		t.Fatalf("run = %+v, stdout %q", r, out.Data)
	}
	lines := strings.SplitN(out.Data, "\n", 5)
	if want := "on on\nmounted by probe-a\nmounted by probe-b\nread-only\n"; strings.Join(lines[:4], "\n")+"\n" != want {
		t.Errorf("stdout = %q, want it to begin %q (env and mounts of both plugins)", out.Data, want)
	}
	// On the session socket: the session-scoped action answers, the control and host ones are
	// refused (one "forbidden" line each).
	var onSocket map[string]string
	if len(lines) < 5 || json.Unmarshal([]byte(lines[4][:strings.LastIndex(lines[4], "}")+1]), &onSocket) != nil ||
		onSocket["origin"] != "session" || !strings.HasSuffix(lines[4], "\n1\n1\n") {
		t.Errorf("session socket calls printed %q, want probe_a.session served (origin session) and the other two forbidden", out.Data)
	}
	order, err := os.ReadFile(filepath.Join(e.dir, "marks", "order"))
	must(t, err)
	if want := "probe-a 2000\nprobe-b 2000\n"; string(order) != want {
		t.Errorf("prefixes ran as %q, want %q (load order, outermost first, as the run's uid)", order, want)
	}
	for _, name := range []string{"probe-a", "probe-b"} {
		var meta struct {
			Begun    bool `json:"begun"`
			BwrapPid int  `json:"bwrap_pid"`
			ExitCode *int `json:"exit_code"`
			Quiesced bool `json:"quiesced"`
		}
		if err := json.Unmarshal(r.Plugins[name], &meta); err != nil || !meta.Begun || meta.ExitCode == nil || *meta.ExitCode != 0 || !meta.Quiesced {
			t.Errorf("process.wait plugins.%s = %s (%v), want its hook's metadata", name, r.Plugins[name], err)
		}
	}
	var got rpc.Run
	must(t, json.Unmarshal(mustPost(t, loop, `{"action":"process.get","params":{"run_id":"`+r.RunID+`"}}`), &got))
	if diff := cmp.Diff(r.Plugins, got.Plugins); diff != "" {
		t.Errorf("process.get plugins differ from process.wait's (-wait +get):\n%s", diff)
	}

	for _, c := range []struct {
		action, url, token string
		ok                 bool
	}{
		{"probe_a.control", loop, "", true}, {"probe_a.control", host, token, true},
		{"probe_a.host", loop, "", false}, {"probe_a.host", host, token, true},
		{"probe_a.session", loop, "", false}, {"probe_a.session", host, token, false},
	} {
		res, rerr := call(t, c.url, c.token, c.action, `{}`)
		switch {
		case c.ok && rerr != nil:
			t.Errorf("%s on %s: %v, want served", c.action, c.url, rerr)
		case !c.ok && (rerr == nil || rerr.Code != rpc.CodeForbidden):
			t.Errorf("%s on %s = %s %v, want forbidden", c.action, c.url, res, rerr)
		}
	}

	var info rpc.SystemInfo
	must(t, json.Unmarshal(mustPost(t, loop, `{"action":"system.info"}`), &info))
	want := []rpc.PluginInfo{
		{Name: "probe-a", Installed: true, Enabled: true, Flag: "--probe-a", APIVersion: 1, Version: "0.1.0"},
		{Name: "probe-b", Installed: true, Enabled: true, Flag: "--probe-b", APIVersion: 1, Version: "0.1.0"},
	}
	if diff := cmp.Diff(want, info.Plugins); diff != "" {
		t.Errorf("system.info plugins (-want +got):\n%s", diff)
	}

	must(t, stop())
	wantLog := []string{"open probe-a", "open probe-b", "run probe-a s", "run probe-b s", "begin probe-a", "begin probe-b",
		"end probe-b", "end probe-a", "close probe-b", "close probe-a"}
	if diff := cmp.Diff(wantLog, e.calls()); diff != "" {
		t.Errorf("plugin calls (-want +got):\n%s", diff)
	}
}

// TestPluginStartRefusals checks, on the real daemon's start, that a plugin that fails to open
// has the ones already open closed in reverse order, and that conflicting contributions and a
// plugin built for another API version are refused, naming both.
func TestPluginStartRefusals(t *testing.T) {
	root := btrfsRoot(t)
	t.Run("failed open", func(t *testing.T) {
		e := newProbeEnv(t)
		broken := e.probe(t, "probe-c")
		broken.Open = func(context.Context, plugin.Core) (*plugin.Contribution, error) {
			e.record("open probe-c")
			return nil, errors.New("no kernel BTF")
		}
		_, _, _, stop := inProcess(t, root, []plugin.Plugin{e.probe(t, "probe-a"), e.probe(t, "probe-b"), broken})
		if err := stop(); err == nil || !strings.Contains(err.Error(), "--probe-c: open the probe-c plugin: no kernel BTF") {
			t.Fatalf("serve = %v, want probe-c's open error", err)
		}
		if diff := cmp.Diff([]string{"open probe-a", "open probe-b", "open probe-c", "close probe-b", "close probe-a"}, e.calls()); diff != "" {
			t.Errorf("plugin calls (-want +got):\n%s", diff)
		}
	})
	t.Run("conflict", func(t *testing.T) {
		e := newProbeEnv(t)
		a, b := e.probe(t, "probe-a"), e.probe(t, "probe-b")
		open := b.Open
		b.Open = func(ctx context.Context, core plugin.Core) (*plugin.Contribution, error) {
			c, err := open(ctx, core)
			c.Env = map[string]string{"ALLOX_PROBE_A": "mine"}
			return c, err
		}
		_, _, _, stop := inProcess(t, root, []plugin.Plugin{a, b})
		if err := stop(); !errors.Is(err, plugin.ErrConflict) || !strings.Contains(err.Error(), "the probe-b plugin and the probe-a plugin both contribute the environment variable ALLOX_PROBE_A") {
			t.Fatalf("serve = %v, want the conflict naming both plugins", err)
		}
	})
	t.Run("core conflict", func(t *testing.T) {
		e := newProbeEnv(t)
		a := e.probe(t, "probe-a")
		open := a.Open
		a.Open = func(ctx context.Context, core plugin.Core) (*plugin.Contribution, error) {
			c, err := open(ctx, core)
			c.Actions["process.start"] = plugin.Action{Handler: func(context.Context, *plugin.Call) (any, error) { return nil, nil }}
			return c, err
		}
		_, _, _, stop := inProcess(t, root, []plugin.Plugin{a})
		if err := stop(); !errors.Is(err, plugin.ErrConflict) || !strings.Contains(err.Error(), "the probe-a plugin and the core both contribute the action process.start") {
			t.Fatalf("serve = %v, want the conflict naming the plugin and the core", err)
		}
	})
	t.Run("version", func(t *testing.T) {
		e := newProbeEnv(t)
		a := e.probe(t, "probe-a")
		a.API = 2
		_, _, _, stop := inProcess(t, root, []plugin.Plugin{a})
		if err := stop(); !errors.Is(err, plugin.ErrVersion) || !strings.Contains(err.Error(), "Plugin API v2") || !strings.Contains(err.Error(), "speaks Plugin API v1") {
			t.Fatalf("serve = %v, want the version refusal naming both versions", err)
		}
		if len(e.calls()) != 0 {
			t.Errorf("plugins opened despite the refusal: %v", e.calls())
		}
	})
}

// TestInstalledNotEnabledChangesNothing checks that an installed plugin that is not enabled is
// never opened and adds nothing to a run.
func TestInstalledNotEnabledChangesNothing(t *testing.T) {
	root := btrfsRoot(t)
	e := newProbeEnv(t)
	p := e.probe(t, "probe-a")
	p.Enabled = false
	loop, _, _, stop := inProcess(t, root, []plugin.Plugin{p})
	mustPost(t, loop, `{"action":"agent.create","params":{"agent_id":"a"}}`)
	mustPost(t, loop, `{"action":"session.create","params":{"agent_id":"a","session_id":"s"}}`)
	r, _ := runIn(t, loop, "s", `test -z "$ALLOX_PROBE_A" && test ! -e /run/probe-a`)
	if !exited0(r) || len(r.Plugins) != 0 {
		t.Errorf("run = %+v, want exit 0 with no env, mount or metadata of the disabled plugin", r)
	}
	if _, rerr := post(t, loop, `{"action":"probe_a.control"}`); rerr == nil || rerr.Code != rpc.CodeUnknownAction {
		t.Errorf("the disabled plugin's action = %v, want unknown", rerr)
	}
	must(t, stop())
	if _, err := os.Stat(filepath.Join(e.dir, "marks", "order")); !errors.Is(err, os.ErrNotExist) || len(e.calls()) != 0 {
		t.Errorf("the disabled plugin was opened or its prefix ran: calls %v, marks %v", e.calls(), err)
	}
}
