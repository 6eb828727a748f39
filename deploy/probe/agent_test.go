package probe

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/allox-os/allox/deploy/probe/internal/agent"
	"github.com/allox-os/allox/deploy/probe/internal/probe"
	"github.com/allox-os/allox/deploy/probe/internal/scriptedmodel"
	"github.com/allox-os/allox/deploy/probe/internal/spec"
	"github.com/allox-os/allox/deploy/probe/internal/wire"
	"github.com/allox-os/allox/internal/artifact"
	"github.com/allox-os/allox/internal/rpc"
	"github.com/allox-os/allox/internal/testenv"
	"github.com/allox-os/allox/internal/vm"
)

// agentsOut is the subdirectory of the build output that `make image` builds from
// qemu-tests/testdata/agents.hcl: the appliance with the three agents' CLIs from the npm registry.
const agentsOut = "agents"

// modelPort is where the sandbox reaches the scripted model: vm.GuestFwdAddr:modelPort.
const modelPort = 8080

// The agents' CLIs in a real appliance under QEMU, started by the Probe's QEMU runtime: each of
// the three is installed and starts in a session; codex runs a scripted task end to end (the
// model asks for a shell command that writes a file; the file appears in the session's
// workspace); an adapter whose CLI is killed mid-task is restarted and reported while another
// session's adapter is untouched; and one killed past its bound is escalated.
func TestAgentAdaptersInAppliance(t *testing.T) {
	out := agentsAppliance(t)
	model, port := serveModel(t, scriptedmodel.Script{Command: "sleep 20; echo made-by-the-agent > result.txt", Final: "The file is written."})
	ctx := t.Context()
	br, client := bootAgents(t, out, port)
	for _, s := range []string{"codex", "claude_code", "opencode", "k1", "k2", "k3"} {
		if _, err := br.EnsureSession(ctx, "main", s); err != nil {
			t.Fatal(err)
		}
	}
	task := agent.Task{Prompt: "write result.txt", ModelURL: fmt.Sprintf("http://%s:%d", vm.GuestFwdAddr, modelPort), APIKey: "sk-scripted", Model: "scripted"}
	events := &eventLog{}

	t.Run("installed", func(t *testing.T) {
		for name, want := range map[string]string{"codex": "codex-cli 0.171.0", "claude_code": "2.1.332 (Claude Code)", "opencode": "1.18.33"} {
			cli, _ := agent.Lookup(name)
			got := runIn(t, client, "codex", cli.Binary, "--version")
			if !strings.Contains(got, want) {
				t.Errorf("%s --version in the session's sandbox: %q, want %q", cli.Binary, got, want)
			}
		}
	})

	endToEnd := func(name string) {
		t.Run(name+" task end to end", func(t *testing.T) {
			a := agent.Start(ctx, agent.Config{Client: client, DevBox: "agents", Agent: "main", Session: name, CLI: agent.CLIs[name], Task: task,
				Restart: probe.HealPolicy{MaxAttempts: 3, Backoff: time.Second, MaxBackoff: 4 * time.Second}, Emit: events.add})
			waitDone(t, a)
			if st, n, runs := a.State(); st != wire.AgentDone || n != 0 || len(runs) != 1 {
				t.Fatalf("adapter state %s (%s), %d restarts, runs %v; screen:\n%s", st, a.Reason(), n, runs, a.Screen())
			}
			if got := runIn(t, client, name, "/bin/cat", "result.txt"); !strings.Contains(got, "made-by-the-agent") {
				t.Errorf("result.txt in the session's workspace: %q; the model saw %+v; screen:\n%s", got, model.Requests(), a.Screen())
			}
			if got := events.statuses(name); !strings.HasPrefix(got, "working") || !strings.HasSuffix(got, "done") {
				t.Errorf("the session's status events %q: want working ... done", got)
			}
		})
	}
	endToEnd("codex")
	endToEnd("claude_code")

	t.Run("killed mid-task", func(t *testing.T) {
		var reported []probe.Fault
		var mu sync.Mutex
		report := func(f probe.Fault) { mu.Lock(); reported = append(reported, f); mu.Unlock() }
		start := func(session string, max int) *agent.Adapter {
			return agent.Start(ctx, agent.Config{Client: client, DevBox: "agents", Agent: "main", Session: session, CLI: agent.CLIs["codex"], Task: task,
				Restart: probe.HealPolicy{MaxAttempts: max, Backoff: time.Second, MaxBackoff: 4 * time.Second}, Emit: events.add, Report: report})
		}
		kill := func(a *agent.Adapter) { // while the model's command runs
			deadline := time.Now().Add(vm.Scaled(3 * time.Minute))
			for !strings.Contains(a.Screen(), "sleep 20") {
				if time.Now().After(deadline) {
					t.Fatalf("the model's command not on the agent's screen:\n%s", a.Screen())
				}
				time.Sleep(200 * time.Millisecond)
			}
			_, _, runs := a.State()
			if err := client.Call(ctx, rpc.ActionProcessKill, map[string]string{"run_id": runs[0]}, nil); err != nil {
				t.Fatalf("process.kill: %v", err)
			}
		}
		k1, k2 := start("k1", 3), start("k2", 3)
		kill(k1)
		waitDone(t, k1)
		waitDone(t, k2)
		k3 := start("k3", 0)
		kill(k3)
		waitDone(t, k3)
		if st, n, runs := k1.State(); st != wire.AgentDone || n != 1 || len(runs) != 2 {
			t.Errorf("k1 after the kill: %s, %d restarts, runs %v, want done after 1 restart", st, n, runs)
		}
		if got := runIn(t, client, "k1", "/bin/cat", "result.txt"); !strings.Contains(got, "made-by-the-agent") {
			t.Errorf("k1's task after the restart: result.txt %q", got)
		}
		if st, n, runs := k2.State(); st != wire.AgentDone || n != 0 || len(runs) != 1 {
			t.Errorf("k2 (not killed) %s, %d restarts, runs %v: another session's kill touched it", st, n, runs)
		}
		if st, _, _ := k3.State(); st != wire.AgentFailed {
			t.Errorf("k3 killed with no restarts left: %s, want failed", st)
		}
		if f := events.of("k1", wire.EventFault); len(f) != 1 || !strings.Contains(f[0], "restart 1 of 3") {
			t.Errorf("k1's fault events %q: want one restart reported", f)
		}
		if f := events.of("k2", wire.EventFault); len(f) != 0 {
			t.Errorf("k2's fault events %q: want none", f)
		}
		mu.Lock()
		defer mu.Unlock()
		if e := events.of("k3", wire.EventEscalation); len(e) != 1 || len(reported) != 1 || reported[0].Scope != "agents/k3" || reported[0].Class != agent.FaultAdapterFailed {
			t.Errorf("k3's escalation events %q, faults reported %v: want one escalation of agents/k3", e, reported)
		}
	})
	endToEnd("opencode")
}

// agentsAppliance is the agents appliance's output directory; the test skips (or fails in CI)
// without it or QEMU.
func agentsAppliance(t *testing.T) string {
	out := filepath.Join(testenv.NeedOut(t, filepath.Join(agentsOut, artifact.Boot), filepath.Join(agentsOut, artifact.Rootfs)), agentsOut)
	testenv.Tool(t, "qemu-system-x86_64", "apt-get install qemu-system-x86")
	return out
}

// bootAgents boots the agents appliance in out under the Probe's QEMU runtime, the sandbox
// reaching the scripted model on the host's port through modelPort, until the test ends; it
// returns a bridge to the appliance, whose agent "main" exists, and an RPC client of its host
// listener.
func bootAgents(t *testing.T, out string, port int) (*probe.Bridge, *rpc.Client) {
	t.Helper()
	rt := &probe.QEMURuntime{Out: out, State: t.TempDir(), Sockets: shortDir(t),
		GuestFwd: map[int]int{modelPort: port}, TCGCPU: "max", Logf: func(string, ...any) {}}
	sb, err := rt.Boot(t.Context(), spec.DevBox{Name: "agents", MemoryMiB: 2048})
	if err != nil {
		t.Fatalf("boot the agents appliance: %v", err)
	}
	t.Cleanup(func() { sb.Stop(context.Background()) })
	br := probe.NewBridge(sb.Endpoint(), sb.Token())
	if err := br.EnsureAgent(t.Context(), "main"); err != nil {
		t.Fatal(err)
	}
	return br, rpc.NewClient(sb.Endpoint(), sb.Token(), &http.Client{Transport: &http.Transport{Proxy: nil}})
}

// serveModel serves a scripted model on the host's loopback until the test ends; the sandbox
// reaches it through the runtime's guest forward of modelPort to the returned port.
func serveModel(t *testing.T, s scriptedmodel.Script) (*scriptedmodel.Server, int) {
	model := scriptedmodel.New(s)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: model}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return model, ln.Addr().(*net.TCPAddr).Port
}

func waitDone(t *testing.T, a *agent.Adapter) {
	t.Helper()
	select {
	case <-a.Done():
	case <-time.After(vm.Scaled(40 * time.Second)):
		st, n, runs := a.State()
		t.Fatalf("adapter not finished: %s (%s), %d restarts, runs %v; screen:\n%s", st, a.Reason(), n, runs, a.Screen())
	}
}

// runIn runs argv in session's sandbox and returns its output.
func runIn(t *testing.T, c *rpc.Client, session string, argv ...string) string {
	t.Helper()
	x, err := c.Exec(t.Context(), map[string]any{"agent_id": "main", "session_id": session, "argv": argv})
	if err != nil {
		t.Fatalf("exec %v: %v", argv, err)
	}
	var b bytes.Buffer
	go io.Copy(&b, x.Stderr)
	o, _ := io.ReadAll(x.Stdout)
	r, err := x.Wait(t.Context())
	if err == nil && (r.ExitCode == nil || *r.ExitCode != 0) {
		code := -1
		if r.ExitCode != nil {
			code = *r.ExitCode
		}
		return fmt.Sprintf("%s%s[run %s, exit %d, signal %q, reason %q]", o, b.String(), r.State, code, r.Signal, r.Reason)
	}
	return string(o) + b.String()
}

// eventLog keeps the Probe events the adapters emit.
type eventLog struct {
	mu  sync.Mutex
	evs []wire.Event
}

func (l *eventLog) add(ev wire.Event) { l.mu.Lock(); l.evs = append(l.evs, ev); l.mu.Unlock() }

func (l *eventLog) of(session, kind string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, ev := range l.evs {
		if ev.Session == session && ev.Kind == kind {
			out = append(out, ev.Reason)
		}
	}
	return out
}

// statuses is the session's status changes, space-separated.
func (l *eventLog) statuses(session string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, ev := range l.evs {
		if ev.Session == session && ev.Kind == wire.EventAgentStatus {
			out = append(out, ev.Phase)
		}
	}
	return strings.Join(out, " ")
}
