package qemutests

import (
	"path/filepath"
	"testing"

	"github.com/allox-os/allox/internal/rpc"
)

// monitorOut is the subdirectory of outDir() that `make image` builds from testdata/monitor.hcl:
// the appliance with the monitor plugin enabled.
const monitorOut = "monitor"

// monitorRun is the part of a monitor run record this test reads (the record is the plugin's
// JSON; the test reads it as a client does).
type monitorRun struct {
	RunID        string `json:"run_id"`
	TurnID       string `json:"turn_id"`
	Link         string `json:"link"`
	ParentSpanID string `json:"parent_span_id"`
	Usage        *struct {
		CPUUsec    uint64 `json:"cpu_usec"`
		MemoryPeak uint64 `json:"memory_peak_bytes"`
		PidsPeak   uint64 `json:"pids_peak"`
	} `json:"usage"`
}

// TestMonitorResourcesInGuest boots the appliance with the monitor and checks the runs' resource
// use where the guest's pure cgroup v2 counts it: a busy loop's CPU time is non-zero, a 96 MiB
// allocation's memory peak is above 64 MiB, both runs are linked to the open turn (the busy loop
// also to its span, by process.start's traceparent), and the summary ranks them.
func TestMonitorResourcesInGuest(t *testing.T) {
	a := needApplianceIn(t, imageMode, filepath.Join(outDir(), monitorOut))
	ctx := testContext(t, 2*bootBudget)
	b := a.bootWith(ctx, t, imageMode, blankDisk(t), nil)
	b.waitReady(ctx, t)
	ids := map[string]any{"agent_id": "mon", "session_id": "s"}
	b.call(ctx, t, rpc.ActionAgentCreate, map[string]any{"agent_id": "mon"})
	b.call(ctx, t, rpc.ActionSessionCreate, ids)
	b.call(ctx, t, rpc.ActionTurnBegin, map[string]any{"agent_id": "mon", "session_id": "s", "turn_id": "1"})
	const span = "00f067aa0ba902b7"
	start := func(params map[string]any) rpc.Run {
		params["agent_id"], params["session_id"], params["timeout"] = "mon", "s", 300
		var r rpc.Run
		b.call(ctx, t, rpc.ActionProcessStart, params, &r)
		b.call(ctx, t, rpc.ActionProcessWait, map[string]any{"run_id": r.RunID}, &r)
		if r.ExitCode == nil || *r.ExitCode != 0 {
			t.Fatalf("run %v: %+v", params["argv"], r)
		}
		return r
	}
	busy := start(map[string]any{"argv": []string{"/bin/sh", "-c", `i=0; while [ $i -lt 50000 ]; do i=$((i+1)); done`},
		"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-" + span + "-01"})
	alloc := start(map[string]any{"argv": []string{"python3", "-c", "import time; b = b'x' * (96 << 20); time.sleep(0.2)"}})
	b.call(ctx, t, rpc.ActionTurnEnd, map[string]any{"agent_id": "mon", "session_id": "s", "turn_id": "1", "success": true})

	var res struct {
		Records []monitorRun `json:"records"`
	}
	b.call(ctx, t, "monitor.records", map[string]any{"agent_id": "mon", "session_id": "s", "kind": "run"}, &res)
	runs := map[string]monitorRun{}
	for _, r := range res.Records {
		runs[r.RunID] = r
	}
	for _, r := range res.Records {
		if r.Usage != nil {
			t.Logf("run %s (turn %s, link %s): %+v", r.RunID, r.TurnID, r.Link, *r.Usage)
		}
	}
	switch r := runs[busy.RunID]; {
	case r.Usage == nil || r.Usage.CPUUsec == 0:
		t.Errorf("the busy loop's usage %+v: want CPU time above 0", r.Usage)
	case r.TurnID != "1" || r.Link != "traceparent" || r.ParentSpanID != span:
		t.Errorf("the busy loop's links: %+v, want turn 1 and span %s by traceparent", r, span)
	}
	switch r := runs[alloc.RunID]; {
	case r.Usage == nil || r.Usage.MemoryPeak <= 64<<20:
		t.Errorf("the 96 MiB allocation's usage %+v: want a memory peak above 64 MiB", r.Usage)
	case r.Usage.PidsPeak < 1 || r.TurnID != "1" || r.Link != "turn":
		t.Errorf("the allocation's record: %+v, want a pids peak and turn 1", r)
	}
	var sum struct {
		ByMemory []struct {
			RunID string `json:"run_id"`
		} `json:"costliest_runs_by_memory"`
	}
	b.call(ctx, t, "monitor.summary", map[string]any{"agent_id": "mon", "session_id": "s"}, &sum)
	if len(sum.ByMemory) == 0 || sum.ByMemory[0].RunID != alloc.RunID {
		t.Errorf("monitor.summary's costliest runs by memory: %+v, want the allocation %s first", sum.ByMemory, alloc.RunID)
	}
	b.powerOff(ctx, t)
}
