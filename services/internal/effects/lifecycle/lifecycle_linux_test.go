package lifecycle

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/allox-os/allox/internal/btrfstest"
	"github.com/allox-os/allox/internal/cgroup/cgrouptest"
	"github.com/allox-os/allox/internal/rpc"
	"github.com/allox-os/allox/services/internal/fence"
	"github.com/allox-os/allox/services/internal/store"
	"github.com/allox-os/allox/services/internal/tracked"
	"github.com/allox-os/allox/services/internal/workspace"
)

// programs builds the plugin's four programs once per test binary into a temporary libexec.
var programs struct {
	dir string
	err error
}

func buildPrograms(t testing.TB) string {
	t.Helper()
	if programs.dir != "" || programs.err != nil {
		if programs.err != nil {
			t.Fatal(programs.err)
		}
		return programs.dir
	}
	dir, err := os.MkdirTemp("", "allox-libexec-")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{ObserveProgram, VerifyProgram, RecoveryVerifyProgram, RecoverProgram} {
		pkg := "github.com/allox-os/allox/services/" + strings.TrimPrefix(name, "allox-")
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, name), pkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			programs.err = fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
			t.Fatal(programs.err)
		}
	}
	programs.dir = dir
	return dir
}

// env is a real workspace runtime (Btrfs store, bubblewrap runs in cgroup v2, fences) with the
// observer plugin over freshly built, pinned programs.
type env struct {
	t       testing.TB
	ws      *workspace.Service
	p       *Plugin
	root    string // the store's Btrfs mount
	libexec string
	pins    string
	state   string
}

func newEnv(t testing.TB, scopeJSON string) *env {
	t.Helper()
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Fatal("needs bwrap (apt-get install bubblewrap)")
	}
	root := btrfstest.Mount(t)
	state := filepath.Join(filepath.Dir(root), "state")
	st, err := store.OpenWith(root, state, store.DeleteInBackground) // as the daemon does
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	var b [4]byte
	_, _ = rand.Read(b[:])
	runs, err := tracked.NewManager(tracked.Config{CgroupParent: "allox-effects-test-" + hex.EncodeToString(b[:]),
		RecordsDir: filepath.Join(state, "runs"), AllowManaged: true})
	if err != nil {
		t.Fatal(err)
	}
	cgrouptest.RemoveAtEnd(t, runs.ParentDir())
	fences, err := fence.Open(state)
	if err != nil {
		t.Fatal(err)
	}
	policy, err := workspace.OpenPolicy(state)
	if err != nil {
		t.Fatal(err)
	}
	ws := workspace.New(workspace.Deps{Store: st, Runs: runs, Fences: fences, Policy: policy})
	// A private copy of the programs, so that a test may tamper with one.
	libexec := filepath.Join(filepath.Dir(root), "libexec")
	if err := os.MkdirAll(libexec, 0o755); err != nil {
		t.Fatal(err)
	}
	var pins strings.Builder
	for _, name := range []string{ObserveProgram, VerifyProgram, RecoveryVerifyProgram, RecoverProgram} {
		data, err := os.ReadFile(filepath.Join(buildPrograms(t), name))
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(libexec, name)
		if err := os.WriteFile(dst, data, 0o755); err != nil {
			t.Fatal(err)
		}
		pins.WriteString(pinFor(t, dst) + "  " + dst + "\n")
	}
	pinFile := filepath.Join(libexec, "pins")
	if err := os.WriteFile(pinFile, []byte(pins.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Libexec: libexec, Pins: pinFile, Evidence: filepath.Join(state, "effects"), StoreRoot: root, StoreState: state}
	if scopeJSON != "" {
		cfg.Scope = filepath.Join(libexec, "scope.json")
		if err := os.WriteFile(cfg.Scope, []byte(scopeJSON), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	p, err := New(cfg, ws)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	if _, err := ws.CreateAgent("a", nil); err != nil {
		t.Fatal(err)
	}
	return &env{t: t, ws: ws, p: p, root: root, libexec: libexec, pins: pinFile, state: state}
}

func (e *env) session(id string) {
	e.t.Helper()
	if _, err := e.ws.CreateSession("a", id, nil); err != nil {
		e.t.Fatal(err)
	}
}

// start runs argv through the plugin as process.start does and returns the final run record.
func (e *env) start(session string, rp RunParams, managed bool, argv ...string) (*tracked.Status, error) {
	req := tracked.StartRequest{AgentID: "a", SessionID: session, Argv: argv, Managed: managed}
	undo, err := e.p.Prepare(context.Background(), &req, rp)
	if err != nil {
		return nil, err
	}
	st, err := e.ws.StartProcess(context.Background(), req)
	if err != nil {
		undo()
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return e.ws.WaitRun(ctx, st.RunID)
}

func (e *env) effects(st *tracked.Status) rpc.Effects {
	e.t.Helper()
	var eff rpc.Effects
	if err := json.Unmarshal(st.Meta[Name], &eff); err != nil {
		e.t.Fatalf("run %s effects %q: %v", st.RunID, st.Meta[Name], err)
	}
	e.t.Logf("run %s: %+v", st.RunID, eff)
	return eff
}

var seed = []string{"/bin/sh", "-c", "printf changed > effect.txt"}

func TestProtocol3SeedExampleConsistent(t *testing.T) {
	e := newEnv(t, "")
	e.session("s1")
	st, err := e.start("s1", RunParams{Recovery: &rpc.Recovery{ScrubRuntime: true}}, false, seed...)
	if err != nil {
		t.Fatal(err)
	}
	eff := e.effects(st)
	if eff.Protocol != 3 || eff.Verdict != rpc.VerdictConsistent || eff.Evidence != rpc.EvidenceComplete || eff.Fenced {
		t.Fatalf("effects %+v, want protocol 3 CONSISTENT COMPLETE", eff)
	}
	current, _, _, _ := e.ws.SessionPaths("a", "s1")
	if _, err := os.Stat(filepath.Join(current, "effect.txt")); !os.IsNotExist(err) {
		t.Errorf("effect.txt after the recovery: %v; want it gone", err)
	}
	cp, err := e.ws.GetCheckpoint("a", "s1", eff.CheckpointID)
	if err != nil || !cp.Pinned {
		t.Errorf("baseline %q: %+v, %v; want it pinned", eff.CheckpointID, cp, err)
	}
	for _, f := range []string{"manifest.json", "recovery-report.json"} {
		if _, err := os.Stat(filepath.Join(eff.EvidencePath, f)); err != nil {
			t.Errorf("evidence set: %v", err)
		}
	}
}

func TestProtocol2SeedExample(t *testing.T) {
	e := newEnv(t, "")
	e.session("s1")
	st, err := e.start("s1", RunParams{}, false, seed...)
	if err != nil {
		t.Fatal(err)
	}
	if eff := e.effects(st); eff.Protocol != 2 || eff.Verdict != rpc.VerdictConsistent || eff.Evidence != rpc.EvidenceComplete {
		t.Fatalf("effects %+v, want protocol 2 CONSISTENT COMPLETE", eff)
	}
}

// TestSharedWriteInconsistent: a managed run writes the agent's shared/, which no rollback
// restores: INCONSISTENT naming shared, also under protocol 3, where require_consistent fences.
func TestSharedWriteInconsistent(t *testing.T) {
	e := newEnv(t, "")
	e.session("s1")
	st, err := e.start("s1", RunParams{Recovery: &rpc.Recovery{}}, true, "/bin/sh", "-c", `echo x > "$ALLOX_AGENT_SHARED/note"`)
	if err != nil {
		t.Fatal(err)
	}
	eff := e.effects(st)
	if eff.Verdict != rpc.VerdictInconsistent || eff.Domains["shared"] != rpc.VerdictInconsistent || !eff.Fenced {
		t.Fatalf("effects %+v, want INCONSISTENT naming shared, and the session fenced (require_consistent)", eff)
	}
	if _, err := e.start("s1", RunParams{}, false, "/bin/true"); err == nil || !strings.Contains(err.Error(), "require_consistent") {
		t.Errorf("next start = %v, want the fence's reason", err)
	}
}

// TestTamperedRecoverFences: the recover program no longer matches its pin → fenced, never run.
func TestTamperedRecoverFences(t *testing.T) {
	e := newEnv(t, "")
	e.session("s1")
	f, err := os.OpenFile(filepath.Join(e.libexec, RecoverProgram), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte{0})
	f.Close()
	st, err := e.start("s1", RunParams{Recovery: &rpc.Recovery{}}, false, seed...)
	if err != nil {
		t.Fatal(err)
	}
	eff := e.effects(st)
	if !eff.Fenced || eff.Verdict == rpc.VerdictConsistent || !strings.Contains(eff.Reason, "pin") {
		t.Fatalf("effects %+v, want fenced with a pin mismatch", eff)
	}
	if fc, ok := e.ws.FenceOf("a", "s1"); !ok || fc.Evidence != eff.EvidencePath {
		t.Errorf("fence %+v, want the evidence path %s", fc, eff.EvidencePath)
	}
}

// TestObserverKilledFences: the observer dies mid-run → the run is killed and the session fenced.
func TestObserverKilledFences(t *testing.T) {
	e := newEnv(t, "")
	e.session("s1")
	st, ro := e.startSleep("s1")
	ro.obs.kill()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := e.ws.WaitRun(ctx, st.RunID)
	if err != nil {
		t.Fatal(err)
	}
	eff := e.effects(st)
	if st.State != tracked.StateKilled || !eff.Fenced || eff.Verdict == rpc.VerdictConsistent {
		t.Fatalf("run %+v effects %+v: want killed and fenced", st, eff)
	}
	if _, err := e.start("s1", RunParams{}, false, "/bin/true"); err == nil || !strings.Contains(err.Error(), "observer") {
		t.Errorf("next start = %v, want the fence's reason", err)
	}
}

// TestBadRecoveryParamsLoseNothing: an explicit baseline that does not exist is refused, and the
// session keeps exactly its checkpoints.
func TestBadRecoveryParamsLoseNothing(t *testing.T) {
	e := newEnv(t, "")
	e.session("s1")
	before, err := e.ws.ListCheckpoints("a", "s1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.start("s1", RunParams{Recovery: &rpc.Recovery{}, CheckpointID: "nope"}, false, seed...); err == nil {
		t.Fatal("a missing checkpoint_id was accepted")
	}
	if _, err := e.start("s1", RunParams{CheckpointID: "nope"}, false, seed...); err == nil {
		t.Fatal("checkpoint_id without recovery was accepted")
	}
	after, err := e.ws.ListCheckpoints("a", "s1")
	if err != nil || len(after) != len(before) {
		t.Errorf("checkpoints after refused requests: %d, %v; want the %d from before", len(after), err, len(before))
	}
}

// TestSystemDomainsInconsistent: managed runs that change a sysctl or add a mount, on the real
// host kernel, each INCONSISTENT naming its domain (the host state is put back afterwards).
func TestSystemDomainsInconsistent(t *testing.T) {
	e := newEnv(t, `{"sysctl": ["kernel.msgmax"], "mounts": true}`)
	const knob = "/proc/sys/kernel/msgmax"
	old, err := os.ReadFile(knob)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.WriteFile(knob, old, 0) })
	mnt := t.TempDir()
	t.Cleanup(func() { _ = exec.Command("umount", mnt).Run() })
	for _, c := range []struct{ domain, script string }{
		{"sysctl", `v=$(cat ` + knob + `); echo $((v+1)) > ` + knob},
		{"mounts", `mount -t tmpfs allox-effects-test ` + mnt},
	} {
		t.Run(c.domain, func(t *testing.T) {
			e.t = t
			e.session(c.domain)
			st, err := e.start(c.domain, RunParams{}, true, "/bin/sh", "-c", c.script)
			if err != nil {
				t.Fatal(err)
			}
			eff := e.effects(st)
			if st.ExitCode != 0 || eff.Verdict != rpc.VerdictInconsistent || eff.Domains[c.domain] != rpc.VerdictInconsistent {
				t.Errorf("run %+v effects %+v: want INCONSISTENT naming %s", st, eff, c.domain)
			}
			for d, v := range eff.Domains {
				if d != c.domain && d != "workspace" && v != rpc.VerdictConsistent {
					t.Errorf("domain %s is %s: only %s changed", d, v, c.domain)
				}
			}
		})
	}
}

// startSleep starts an observed /bin/sleep 60 and returns its record and its observer.
func (e *env) startSleep(session string) (*tracked.Status, *runObserver) {
	e.t.Helper()
	req := tracked.StartRequest{AgentID: "a", SessionID: session, Argv: []string{"/bin/sleep", "60"}}
	if _, err := e.p.Prepare(context.Background(), &req, RunParams{}); err != nil {
		e.t.Fatal(err)
	}
	st, err := e.ws.StartProcess(context.Background(), req)
	if err != nil {
		e.t.Fatal(err)
	}
	e.p.mu.Lock()
	ro := e.p.running[st.RunID]
	e.p.mu.Unlock()
	if ro == nil {
		e.t.Fatal("no observer registered for the run")
	}
	return st, ro
}

// waitStandby waits for the plugin's standby observer and returns its pid.
func (e *env) waitStandby() int {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		e.p.mu.Lock()
		o := e.p.standby
		e.p.mu.Unlock()
		if o != nil {
			return o.cmd.Process.Pid
		}
		time.Sleep(10 * time.Millisecond)
	}
	e.t.Fatal("no standby observer after 30s")
	return 0
}

// TestStandbyObserverRunsTheNextRun: the run's observer is the standby started before it, a new
// standby follows, and a standby that died while waiting is replaced by one started for the run.
func TestStandbyObserverRunsTheNextRun(t *testing.T) {
	e := newEnv(t, "")
	e.session("s1")
	pid := e.waitStandby()
	st, ro := e.startSleep("s1")
	if ro.obs.cmd.Process.Pid != pid {
		t.Fatalf("the run's observer is not the standby (pid %d)", pid)
	}
	next := e.waitStandby()
	if next == pid {
		t.Fatal("the standby taken by the run is still the standby")
	}
	if err := e.ws.KillRun(st.RunID); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := e.ws.WaitRun(ctx, st.RunID)
	if err != nil {
		t.Fatal(err)
	}
	if eff := e.effects(st); eff.Fenced {
		t.Fatalf("a killed run with its observer intact fenced the session: %+v", eff)
	}

	if err := syscall.Kill(next, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	st, err = e.start("s1", RunParams{}, false, seed...)
	if err != nil {
		t.Fatal(err)
	}
	if eff := e.effects(st); eff.Fenced || eff.Verdict != rpc.VerdictConsistent || eff.Evidence != rpc.EvidenceComplete {
		t.Fatalf("run after the standby died: %+v, want CONSISTENT COMPLETE", eff)
	}
}

// TestChangedObserverRefusedWhileAStandbyWaits: the observer program is changed on disk after the
// standby started from its checked copy; the next run is still refused for the pin, and fenced.
func TestChangedObserverRefusedWhileAStandbyWaits(t *testing.T) {
	e := newEnv(t, "")
	e.session("s1")
	e.waitStandby()
	f, err := os.OpenFile(filepath.Join(e.libexec, ObserveProgram), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte{0})
	f.Close()
	_, err = e.start("s1", RunParams{}, false, "/bin/true")
	if err == nil || !strings.Contains(err.Error(), "pin") {
		t.Fatalf("start with a changed observer = %v, want refused for its pin", err)
	}
	if _, ok := e.ws.FenceOf("a", "s1"); !ok {
		t.Error("session not fenced after the observer failed its pin")
	}
}
