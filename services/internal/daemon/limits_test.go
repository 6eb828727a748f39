package daemon

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"github.com/allox-os/allox/internal/testenv"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/allox-os/allox/internal/btrfstest"
	"github.com/allox-os/allox/internal/limit"
	"github.com/allox-os/allox/internal/rpc"
	"github.com/allox-os/allox/services/internal/fence"
	"github.com/allox-os/allox/services/internal/store"
	"github.com/allox-os/allox/services/internal/system"
	"github.com/allox-os/allox/services/internal/tracked"
	"github.com/allox-os/allox/services/internal/workspace"
	"github.com/google/go-cmp/cmp"
)

func TestParseLimitFlags(t *testing.T) {
	root := t.TempDir()
	got, err := ParseFlags([]string{"--root", root,
		"--session-limits", "pids_max=4096,memory_max=4GiB,memory_swap_max=0,cpu_weight=100",
		"--run-limits", "pids_max=1024,memory_max=2147483648",
		"--max-limits", "pids_max=16384,memory_max=16GiB,memory_swap_max=4GiB,cpu_weight=10000",
		"--runs-memory-reserve", "192MiB"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := Config{SessionLimits: limit.Set{PidsMax: 4096, MemoryMax: 4 << 30, MemorySwapMax: limit.Int64(0), CPUWeight: 100},
		RunLimits: limit.Set{PidsMax: 1024, MemoryMax: 2 << 30},
		MaxLimits: limit.Set{PidsMax: 16384, MemoryMax: 16 << 30, MemorySwapMax: limit.Int64(4 << 30), CPUWeight: 10000}, RunsMemoryReserve: 192 << 20}
	if diff := cmp.Diff([]any{want.SessionLimits, want.RunLimits, want.MaxLimits, want.RunsMemoryReserve},
		[]any{got.SessionLimits, got.RunLimits, got.MaxLimits, got.RunsMemoryReserve}); diff != "" {
		t.Errorf("limit flags (-want +got):\n%s", diff)
	}
	for _, tt := range []struct {
		name string
		args []string
		msg  string
	}{
		{"syntax", []string{"--run-limits", "pids=5"}, `invalid value "pids=5" for flag -run-limits: unknown limit "pids"`},
		{"range", []string{"--session-limits", "cpu_weight=20000"}, "--session-limits cpu_weight: 20000 is outside 1..10000"},
		{"pids minimum", []string{"--run-limits", "pids_max=3"}, "--run-limits pids_max: 3 is outside 16..4194304"},
		{"default above max", []string{"--session-limits", "memory_max=8GiB", "--max-limits", "memory_max=4GiB"},
			"--session-limits memory_max: 8GiB exceeds the maximum 4GiB of --max-limits: lower the default or raise the maximum"},
		{"run above max", []string{"--run-limits", "pids_max=100", "--max-limits", "pids_max=50"}, "--run-limits pids_max: 100 exceeds the maximum 50"},
		{"reserve", []string{"--runs-memory-reserve", "lots"}, "a size is bytes"},
	} {
		_, err := ParseFlags(append([]string{"--root", root}, tt.args...), io.Discard)
		if !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("%s: %v; want a usage error containing %q", tt.name, err, tt.msg)
		}
	}
}

// limitsEnv is the workspace runtime as the daemon builds it — real Btrfs, real bubblewrap and
// cgroups — behind the router, so the tests go through the RPC decoding and error mapping.
type limitsEnv struct {
	state  string
	router *Router
	ws     *workspace.Service
	store  *store.Store
	limits *workspace.Limits
	cfg    tracked.Config
}

var testSessionDefaults = limit.Set{PidsMax: 4096, MemoryMax: 4 << 30, MemorySwapMax: limit.Int64(0), CPUWeight: 100}
var testMax = limit.Set{PidsMax: 16384, MemoryMax: 16 << 30, MemorySwapMax: limit.Int64(4 << 30), CPUWeight: 10000}

func newLimitsEnv(t *testing.T, root, state, parent string) *limitsEnv {
	t.Helper()
	st, err := store.OpenWith(root, state, store.DeleteInBackground)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	limits, err := workspace.OpenLimits(state, testSessionDefaults, testMax)
	if err != nil {
		t.Fatal(err)
	}
	cfg := tracked.Config{CgroupParent: parent, RecordsDir: filepath.Join(state, "runs"),
		RunLimits: limit.Set{PidsMax: 1024, MemoryMax: 2 << 30}, SessionLimits: limits.Session}
	runs, err := tracked.NewManager(cfg)
	if err != nil {
		t.Fatal(err)
	}
	fences, err := fence.Open(state)
	if err != nil {
		t.Fatal(err)
	}
	policy, err := workspace.OpenPolicy(state)
	if err != nil {
		t.Fatal(err)
	}
	ws := workspace.New(workspace.Deps{Store: st, Runs: runs, Fences: fences, Policy: policy, Limits: limits})
	r := NewRouter()
	if err := errors.Join(RegisterWorkspace(r, ws, nil, nil), RegisterSystemWith(r, system.New(root, "test"), ws, nil)); err != nil {
		t.Fatal(err)
	}
	return &limitsEnv{state: state, router: r, ws: ws, store: st, limits: limits, cfg: cfg}
}

func (e *limitsEnv) call(t *testing.T, action string, params any, out any) *rpc.Error {
	t.Helper()
	raw, err := json.Marshal(params)
	if err != nil {
		t.Fatal(err)
	}
	res, err := e.router.Dispatch(context.Background(), &Call{Action: action, Params: raw, Origin: Loopback})
	if err != nil {
		return rpcError(err)
	}
	if out != nil {
		b, _ := json.Marshal(res)
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatal(err)
		}
	}
	return nil
}

// TestSessionLimitsOverRPC: session.create refuses limits beyond the max naming the field and
// changes nothing; within bounds the session's effective limits are reported by session.get and
// kept across a daemon restart.
func TestSessionLimitsOverRPC(t *testing.T) {
	testenv.Root(t, "for Btrfs and cgroups", "./services/internal/daemon")
	testenv.Tool(t, "bwrap", "apt-get install bubblewrap")
	root := btrfstest.Mount(t)
	state := filepath.Join(filepath.Dir(root), "state")
	var b [4]byte
	_, _ = rand.Read(b[:])
	parent := "allox-daemon-test-" + hex.EncodeToString(b[:])
	e := newLimitsEnv(t, root, state, parent)
	t.Cleanup(func() { removeGroups(filepath.Dir(filepath.Dir(e.ws.CgroupDir("a", "s1", "")))) })
	if err := e.call(t, rpc.ActionAgentCreate, map[string]any{"agent_id": "a"}, nil); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		limits map[string]any
		field  string
		msg    string
	}{
		{map[string]any{"memory_max": int64(32 << 30)}, "params.limits.memory_max", "32GiB exceeds the maximum 16GiB"},
		{map[string]any{"cpu_weight": 0}, "params.limits.cpu_weight", "0 is not a limit"},
		{map[string]any{"pids_max": 8}, "params.limits.pids_max", "8 is outside 16..4194304"},
		{map[string]any{"memory_swap_max": -1}, "params.limits.memory_swap_max", "negative"},
		{map[string]any{"memory": 1}, "params.limits.memory", "unknown field"},
	} {
		err := e.call(t, rpc.ActionSessionCreate, map[string]any{"agent_id": "a", "session_id": "s1", "limits": tt.limits}, nil)
		if err == nil || err.Code != rpc.CodeInvalidParams || err.Field != tt.field || !strings.Contains(err.Message, tt.msg) {
			t.Errorf("limits %v: %+v; want invalid_params at %s with %q", tt.limits, err, tt.field, tt.msg)
		}
		if err := e.call(t, rpc.ActionSessionGet, map[string]any{"agent_id": "a", "session_id": "s1"}, nil); err == nil || err.Code != rpc.CodeNotFound {
			t.Errorf("after a refused session.create the session exists: %+v", err)
		}
	}
	var sess rpc.Session
	if err := e.call(t, rpc.ActionSessionCreate, map[string]any{"agent_id": "a", "session_id": "s1", "turn_checkpoints": false,
		"limits": map[string]any{"pids_max": 64, "memory_max": 256 << 20, "cpu_weight": 50}}, &sess); err != nil {
		t.Fatal(err)
	}
	want := limit.Set{PidsMax: 64, MemoryMax: 256 << 20, MemorySwapMax: limit.Int64(0), CPUWeight: 50}
	if sess.Limits == nil || !cmp.Equal(*sess.Limits, want) {
		t.Errorf("session.create limits = %+v, want %+v", sess.Limits, want)
	}
	// A run: its group is made with the session's limits, capped (pids 64 < the run default 1024).
	var run rpc.Run
	if err := e.call(t, rpc.ActionProcessStart, map[string]any{"agent_id": "a", "session_id": "s1", "argv": []string{"true"}}, &run); err != nil {
		t.Fatal(err)
	}
	if err := e.call(t, rpc.ActionProcessWait, map[string]any{"run_id": run.RunID}, &run); err != nil || run.State != tracked.StateExited {
		t.Fatalf("run: %+v, %v", run, err)
	}
	var info rpc.SystemInfo
	if err := e.call(t, rpc.ActionSystemInfo, map[string]any{}, &info); err != nil {
		t.Fatal(err)
	}
	if l := info.Limits; l == nil || !cmp.Equal(l.SessionDefaults, testSessionDefaults) || len(l.Enforced)+len(l.Skipped) != 4 {
		t.Errorf("system.info limits = %+v", l)
	} else {
		t.Logf("limits in force here: %v, skipped: %v", l.Enforced, l.Skipped)
	}

	// A restart: the session keeps its limits; the defaults may have changed meanwhile.
	e.store.Close()
	e2 := newLimitsEnv(t, root, state, parent)
	e2.limits.Defaults = limit.Set{PidsMax: 100}
	var again rpc.Session
	if err := e2.call(t, rpc.ActionSessionGet, map[string]any{"agent_id": "a", "session_id": "s1"}, &again); err != nil {
		t.Fatal(err)
	}
	if again.Limits == nil || !cmp.Equal(*again.Limits, want) {
		t.Errorf("after a restart session.get limits = %+v, want %+v", again.Limits, want)
	}
	if l, err := e2.ws.SessionLimits("a", "s1"); err != nil || !cmp.Equal(l, want) {
		t.Errorf("limits the run groups get after a restart = %+v, %v", l, err)
	}
	if err := e2.call(t, rpc.ActionSessionDelete, map[string]any{"agent_id": "a", "session_id": "s1"}, nil); err != nil {
		t.Fatal(err)
	}
	if l, _ := e2.limits.Session("a", "s1"); !cmp.Equal(l, e2.limits.Defaults) {
		t.Errorf("a deleted session's limits are still recorded: %+v", l)
	}
}

// removeGroups removes an empty cgroup subtree, leaves first.
func removeGroups(dir string) {
	var dirs []string
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		_ = os.Remove(dirs[i])
	}
}
