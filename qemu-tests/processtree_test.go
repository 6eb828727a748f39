package qemutests

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/allox-os/allox/internal/marker"
	"github.com/allox-os/allox/internal/rpc"
	"github.com/allox-os/allox/internal/vm"
)

// processTreeOut is the subdirectory of outDir() that `make image` builds from
// testdata/process-tree.hcl: the appliance with the eBPF process-tree provider installed and enabled.
const processTreeOut = "process-tree"

// processEvent and processTree are the parts of the process.events and process.tree answers that
// the test reads.
type processEvent struct {
	Kind     string `json:"kind"`
	RunID    string `json:"run_id"`
	PID      int    `json:"pid"`
	Comm     string `json:"comm"`
	Filename string `json:"filename"`
	ExitCode *int   `json:"exit_code"`
}

type processTree struct {
	Source    string  `json:"source"`
	Complete  bool    `json:"complete"`
	Drops     *uint64 `json:"drops"`
	Processes []struct {
		PID      int    `json:"pid"`
		Exe      string `json:"exe"`
		State    string `json:"state"`
		ExitCode *int   `json:"exit_code"`
	} `json:"processes"`
}

// TestProcessTreeInGuest boots the appliance whose daemon has the eBPF process-tree provider
// (plugins = ["process-tree"], --process-tree-provider ebpf) and checks, on the guest's own kernel,
// that a run's exec and exit events are recorded with their exit codes and that nothing was lost.
// A kernel that lacks what the provider needs makes the daemon refuse to start: that is a failure.
func TestProcessTreeInGuest(t *testing.T) {
	a := needApplianceIn(t, imageMode, filepath.Join(outDir(), processTreeOut))
	ctx := testContext(t, 2*bootBudget)
	b := a.boot(ctx, t, imageMode, blankDisk(t))
	b.waitProviderReady(ctx, t)

	call := func(action string, params map[string]any, res any) {
		t.Helper()
		if err := b.rpc.Call(ctx, action, params, res); err != nil {
			t.Fatalf("%s %v: %v", action, params, err)
		}
	}
	ids := map[string]any{"agent_id": "agent-a", "session_id": "session-1"}
	call(rpc.ActionAgentCreate, map[string]any{"agent_id": "agent-a"}, nil)
	call(rpc.ActionSessionCreate, ids, nil)
	var r rpc.Run
	call(rpc.ActionProcessStart, map[string]any{"agent_id": "agent-a", "session_id": "session-1",
		"argv": []string{"/bin/sh", "-c", `(sleep 1 &) ; sh -c "exit 7"; exit 3`}}, &r)
	call(rpc.ActionProcessWait, map[string]any{"run_id": r.RunID}, &r)
	if r.ExitCode == nil || *r.ExitCode != 3 {
		t.Fatalf("run ended %+v, want exit code 3", r)
	}

	// The records trail the run by the ring buffer's poll interval: wait for both exit codes.
	var page struct {
		Source string         `json:"source"`
		Events []processEvent `json:"events"`
	}
	for {
		call(rpc.ActionProcessEvents, map[string]any{"agent_id": "agent-a", "session_id": "session-1",
			"run_id": r.RunID, "limit": 10000}, &page)
		if hasExit(page.Events, 7) && hasExit(page.Events, 3) {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("process.events (source %q) lacks the exits with codes 7 and 3:\n%s", page.Source, dumpGuestEvents(page.Events))
		case <-time.After(50 * time.Millisecond):
		}
	}
	t.Logf("events:\n%s", dumpGuestEvents(page.Events))
	if page.Source != "ebpf" {
		t.Errorf("process.events source %q, want ebpf", page.Source)
	}
	kinds := map[string]int{}
	for _, e := range page.Events {
		kinds[e.Kind]++
		if e.RunID != r.RunID {
			t.Errorf("event of another run: %+v", e)
		}
	}
	if kinds["exec"] == 0 || kinds["exit"] == 0 {
		t.Errorf("events by kind %v, want exec and exit", kinds)
	}

	var tree processTree
	call(rpc.ActionProcessTree, map[string]any{"agent_id": "agent-a", "session_id": "session-1", "run_id": r.RunID}, &tree)
	if tree.Source != "ebpf" || tree.Drops == nil || *tree.Drops != 0 {
		t.Errorf("process.tree source %q drops %v, want ebpf with 0 drops", tree.Source, tree.Drops)
	}

	// The provider is a Plugin API v1 plugin: system.info lists it installed and enabled, first
	// in the load order, and every other plugin this image does not link in as neither; its run
	// hook's metadata is in process.get under its name.
	var info rpc.SystemInfo
	call(rpc.ActionSystemInfo, nil, &info)
	want := rpc.PluginInfo{Name: "process-tree", Installed: true, Enabled: true, Flag: "--process-tree-provider=ebpf", APIVersion: 1, Version: "1.0.0"}
	if len(info.Plugins) < 2 || info.Plugins[0] != want {
		t.Errorf("system.info plugins = %+v, want %+v first", info.Plugins, want)
	}
	for _, p := range info.Plugins[1:] {
		if p.Installed || p.Enabled || p.Flag == "" {
			t.Errorf("system.info plugin %+v: want it known (with its flag) but neither installed nor enabled in this image", p)
		}
	}
	var got rpc.Run
	call(rpc.ActionProcessGet, map[string]any{"run_id": r.RunID}, &got)
	var meta struct {
		RootPID int `json:"root_pid"`
	}
	if err := json.Unmarshal(got.Plugins["process-tree"], &meta); err != nil || meta.RootPID == 0 || meta.RootPID != got.Pid {
		t.Errorf("process.get plugins.process-tree = %s (%v), want root_pid %d, the run's first process it registered", got.Plugins["process-tree"], err, got.Pid)
	}

	// Lineage on the guest's kernel: a daemonized (double-forked) child, setsid, an exec chain, and a
	// burst of 1,000 short processes, all attributed to the run, with their exit codes, losing nothing.
	const burst = 1000
	script := fmt.Sprintf(`(sh -c 'sleep 0.2; exit 11' &) ; setsid sh -c 'exit 12'; env sh -c 'exit 13'; `+
		`i=0; while [ $i -lt %d ]; do /bin/true; i=$((i+1)); done; exit 0`, burst)
	var r2 rpc.Run
	call(rpc.ActionProcessStart, map[string]any{"agent_id": "agent-a", "session_id": "session-1", "argv": []string{"/bin/sh", "-c", script}}, &r2)
	call(rpc.ActionProcessWait, map[string]any{"run_id": r2.RunID}, &r2)
	if r2.ExitCode == nil || *r2.ExitCode != 0 {
		t.Fatalf("lineage run ended %+v", r2)
	}
	trues := 0
	for {
		call(rpc.ActionProcessEvents, map[string]any{"agent_id": "agent-a", "session_id": "session-1",
			"run_id": r2.RunID, "limit": 10000}, &page)
		trues = 0
		for _, e := range page.Events {
			if e.Kind == "exec" && e.Filename == "/bin/true" {
				trues++
			}
		}
		if hasExit(page.Events, 11) && hasExit(page.Events, 12) && hasExit(page.Events, 13) && trues == burst {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("lineage run: exits 11/12/13 %v/%v/%v, %d of %d /bin/true execs recorded", hasExit(page.Events, 11),
				hasExit(page.Events, 12), hasExit(page.Events, 13), trues, burst)
		case <-time.After(100 * time.Millisecond):
		}
	}
	call(rpc.ActionProcessTree, map[string]any{"agent_id": "agent-a", "session_id": "session-1", "run_id": r2.RunID}, &tree)
	if tree.Drops == nil || *tree.Drops != 0 {
		t.Errorf("after the burst: drops %v, want 0", tree.Drops)
	}
	b.powerOff(context.WithoutCancel(ctx), t)
}

// waitProviderReady waits until the daemon is ready. A daemon that could not load the eBPF
// process-tree provider refuses to start, so the ready marker never comes: the test fails as soon
// as the daemon's own error (which names --process-tree-provider=ebpf) reaches the console, quoting it.
func (b *booted) waitProviderReady(ctx context.Context, tb testing.TB) {
	tb.Helper()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	refused := make(chan vm.Line, 1)
	go func() {
		if l, err := b.WaitForLine(ctx, "--process-tree-provider=ebpf"); err == nil {
			refused <- l
			cancel()
		}
	}()
	fail := func(err error) {
		tb.Helper()
		select {
		case l := <-refused:
			tb.Fatalf("the eBPF process-tree provider did not load in the guest, so the daemon refused to start: %s", l.Text)
		default:
			tb.Fatalf("%v (the console shows no process-tree provider error)", err)
		}
	}
	if _, err := b.WaitForLine(ctx, marker.BootDone); err != nil {
		fail(err)
	}
	for _, s := range b.app.info.ReadyServices {
		if _, err := b.WaitForLine(ctx, marker.Ready(s)); err != nil {
			fail(err)
		}
	}
}

func hasExit(evs []processEvent, code int) bool {
	for _, e := range evs {
		if e.Kind == "exit" && e.ExitCode != nil && *e.ExitCode == code {
			return true
		}
	}
	return false
}

func dumpGuestEvents(evs []processEvent) string {
	var b strings.Builder
	for _, e := range evs {
		code := "-"
		if e.ExitCode != nil {
			code = strconv.Itoa(*e.ExitCode)
		}
		fmt.Fprintf(&b, "  %-4s pid %d comm %q filename %q exit %s\n", e.Kind, e.PID, e.Comm, e.Filename, code)
	}
	return b.String()
}
