package tracked

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"github.com/allox-os/allox/internal/cgroup/cgrouptest"
	"github.com/allox-os/allox/internal/testenv"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// env is a real test environment: a workspace tree outside /tmp, a records
// dir and a state dir beside it, and a Manager on the real cgroup v2 mount.
type env struct {
	root, records, state string
	ws, other            Workspace
	m                    *Manager
	cfg                  Config
}

// requireReal skips (or, with CI=true, fails) when the real prerequisites
// are missing: root, bwrap and a writable cgroup v2 mount.
func requireReal(t testing.TB) {
	t.Helper()
	testenv.Root(t, "for cgroups and to start bwrap as the runs' uid", "./services/internal/tracked")
	testenv.Tool(t, "bwrap", "apt-get install bubblewrap")
	if _, err := detectCgroupMount(); err != nil {
		testenv.Unavailable(t, "needs cgroup v2: %v", err)
	}
}

func newEnv(t testing.TB, mod func(*Config)) *env {
	t.Helper()
	requireReal(t)
	base, err := os.MkdirTemp("/var/tmp", "tracked-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o711); err != nil { // bwrap, as the run's uid, must reach the binds
		t.Fatal(err)
	}
	e := &env{root: base, records: filepath.Join(base, "records"), state: filepath.Join(base, "state")}
	agent := filepath.Join(base, "agents", "a", "workspace")
	e.ws = Workspace{Current: filepath.Join(agent, "sessions", "s1", "current"), Shared: filepath.Join(agent, "shared"), AgentDir: agent}
	e.other = Workspace{Current: filepath.Join(agent, "sessions", "s2", "current"), Shared: e.ws.Shared, AgentDir: agent}
	for _, d := range []string{e.ws.Current, e.other.Current, e.ws.Shared, e.state} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	e.cfg = Config{CgroupParent: "allox-test-" + hex.EncodeToString(b[:]), RecordsDir: e.records}
	if mod != nil {
		mod(&e.cfg)
	}
	e.m, err = NewManager(e.cfg)
	if err != nil {
		t.Fatalf("NewManager: %v", err)
	}
	e.cfg = e.m.cfg
	cgrouptest.RemoveAtEnd(t, e.m.ParentDir())
	return e
}

func (e *env) req(session string, argv ...string) StartRequest {
	ws := e.ws
	if session == "s2" {
		ws = e.other
	}
	return StartRequest{AgentID: "a", SessionID: session, Workspace: ws, Argv: argv}
}

// run starts a request and waits for it to end.
func (e *env) run(t testing.TB, req StartRequest) *Status {
	t.Helper()
	st, err := e.m.Start(context.Background(), req)
	if err != nil {
		t.Fatalf("Start(%q): %v", req.Argv, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err = e.m.Wait(ctx, st.RunID)
	if err != nil {
		t.Fatalf("Wait: %v", err)
	}
	return st
}

func (e *env) output(t testing.TB, runID, stream string) string {
	t.Helper()
	var all []byte
	var off int64
	for {
		data, next, eof, err := e.m.Output(runID, stream, off, 0)
		if err != nil {
			t.Fatalf("Output: %v", err)
		}
		all = append(all, data...)
		off = next
		if eof || len(data) == 0 {
			return string(all)
		}
	}
}

// waitProcs polls until the run's cgroup holds at least n processes.
func waitProcs(t testing.TB, cgroup string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		b, _ := os.ReadFile(filepath.Join(cgroup, "cgroup.procs"))
		if len(strings.Fields(string(b))) >= n {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("cgroup %s never held %d processes", cgroup, n)
}
