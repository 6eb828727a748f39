package workspace

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/allox-os/allox/internal/btrfstest"
	"github.com/allox-os/allox/internal/testenv"
	"github.com/allox-os/allox/services/internal/fence"
	"github.com/allox-os/allox/services/internal/store"
	"github.com/allox-os/allox/services/internal/tracked"
)

// newService is the service as the daemon builds it: a real Btrfs store, real cgroup v2 runs
// under bubblewrap, fences and the policy, with agent "a" and sessions s1 and s2, each with
// checkpoint c1.
func newService(t *testing.T) *Service {
	t.Helper()
	testenv.Root(t, "for Btrfs and cgroups", "./services/internal/workspace")
	testenv.Tool(t, "bwrap", "apt-get install bubblewrap")
	root := btrfstest.Mount(t)
	state := filepath.Join(filepath.Dir(root), "state")
	st, err := store.OpenWith(root, state, store.DeleteInBackground)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	var b [4]byte
	_, _ = rand.Read(b[:])
	runs, err := tracked.NewManager(tracked.Config{CgroupParent: "allox-workspace-test-" + hex.EncodeToString(b[:]),
		RecordsDir: filepath.Join(state, "runs")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = runs.PruneCgroups(func(string, string) bool { return false })
		_ = os.Remove(runs.ParentDir())
	})
	fences, err := fence.Open(state)
	if err != nil {
		t.Fatal(err)
	}
	policy, err := OpenPolicy(state)
	if err != nil {
		t.Fatal(err)
	}
	s := New(Deps{Store: st, Runs: runs, Fences: fences, Policy: policy})
	if _, err := s.CreateAgent("a", nil); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"s1", "s2"} {
		if _, err := s.CreateSession("a", id, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := s.CreateCheckpoint("a", id, "c1", store.CheckpointOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// blocked is how long a call waiting for the lock must stay blocked to count as waiting.
const blocked = 300 * time.Millisecond

// returns runs fn in the background; its result arrives on the channel.
func returns(fn func() error) <-chan error {
	c := make(chan error, 1)
	go func() { c <- fn() }()
	return c
}

func await(t *testing.T, what string, c <-chan error) error {
	t.Helper()
	select {
	case err := <-c:
		return err
	case <-time.After(30 * time.Second):
		t.Fatalf("%s still blocked 30 s after the session's lock was released", what)
		return nil
	}
}

// TestSessionChangesWaitForTheLock: every change of a session's state that callers outside the
// service make (checkpoint.delete, the observer's pin, discard, fence and kill) waits while
// another change of the same session holds its lock, and only then changes it; the same change
// of another session does not wait.
func TestSessionChangesWaitForTheLock(t *testing.T) {
	s := newService(t)
	pinned := func(session string) bool {
		cp, err := s.GetCheckpoint("a", session, "c1")
		return err == nil && cp.Pinned
	}
	exists := func(session string) bool { _, err := s.GetCheckpoint("a", session, "c1"); return err == nil }
	fenced := func(session string) bool { _, ok := s.FenceOf("a", session); return ok }
	for _, tc := range []struct {
		name    string
		change  func(session string) error
		changed func(session string) bool
		after   func(session string) error // puts the session back for the next case
	}{
		{"pin", func(ss string) error { return s.PinCheckpoint("a", ss, "c1", true) }, pinned,
			func(ss string) error { return s.PinCheckpoint("a", ss, "c1", false) }},
		{"fence (observer fault)", func(ss string) error { return s.FenceFault("a", ss, "test", "") }, fenced,
			func(ss string) error { _, err := s.Unfence("a", ss); return err }},
		{"fence (session.fence)", func(ss string) error { _, err := s.Fence("a", ss, "test"); return err }, fenced,
			func(ss string) error { _, err := s.Unfence("a", ss); return err }},
		{"checkpoint.delete", func(ss string) error { return s.DeleteCheckpoint("a", ss, "c1") },
			func(ss string) bool { return !exists(ss) }, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.changed("s1") || tc.changed("s2") {
				t.Fatal("BUG: the change is made already")
			}
			unlock := s.lock("a", "s1")
			if err := await(t, tc.name+" of another session", returns(func() error { return tc.change("s2") })); err != nil || !tc.changed("s2") {
				t.Fatalf("%s of s2 while s1 is locked: %v, changed %v; want done", tc.name, err, tc.changed("s2"))
			}
			done := returns(func() error { return tc.change("s1") })
			select {
			case err := <-done:
				unlock()
				t.Fatalf("%s returned %v while another change held the session's lock", tc.name, err)
			case <-time.After(blocked):
			}
			if tc.changed("s1") {
				t.Errorf("%s changed the session while another change held its lock", tc.name)
			}
			unlock()
			if err := await(t, tc.name, done); err != nil || !tc.changed("s1") {
				t.Fatalf("%s after the lock was released: %v, changed %v; want done", tc.name, err, tc.changed("s1"))
			}
			if tc.after != nil {
				if err := errors.Join(tc.after("s1"), tc.after("s2")); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// endObserver is a run's observer whose End, like the system-effects observer's after a fault,
// fences the session and hands the store over (for a recovery) — but only once the test lets it.
type endObserver struct {
	s       *Service
	ending  chan struct{} // closed when End is called
	release chan struct{} // End goes on once closed
}

func (o *endObserver) Begin(*tracked.Status) (json.RawMessage, error) { return nil, nil }
func (o *endObserver) Residue(*tracked.Status) error                  { return nil }
func (o *endObserver) End(st *tracked.Status, _ error) (json.RawMessage, error) {
	close(o.ending)
	<-o.release
	return nil, errors.Join(o.s.FenceFault(st.AgentID, st.SessionID, "observer fault at the run's end", ""),
		o.s.HandoverSession(st.AgentID, st.SessionID, func() error { return nil }))
}

// TestCheckpointDeleteRacingRollback: a checkpoint.delete that arrives while session.rollback
// kills the session's runs waits for the whole rollback, while the runs' end (their observer's
// fence and store handover) goes on under the rollback's lock instead of deadlocking against it;
// the delete then sees the fence that end made and is refused, deleting nothing.
func TestCheckpointDeleteRacingRollback(t *testing.T) {
	s := newService(t)
	o := &endObserver{s: s, ending: make(chan struct{}), release: make(chan struct{})}
	run, err := s.StartProcess(context.Background(), tracked.StartRequest{AgentID: "a", SessionID: "s1",
		Argv: []string{"/bin/sleep", "600"}, Hooks: []tracked.Hook{{Name: "observer", Observer: o, Frozen: true}}})
	if err != nil {
		t.Fatal(err)
	}
	kill := true
	var rolled *store.Session
	rollback := returns(func() error {
		var err error
		rolled, err = s.Rollback(context.Background(), "a", "s1", "c1", &kill)
		return err
	})
	select {
	case <-o.ending:
	case err := <-rollback:
		t.Fatalf("rollback returned %v before the run ended", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the rollback did not kill the run within 30 s")
	}
	del := returns(func() error { return s.DeleteCheckpoint("a", "s1", "c1") })
	select {
	case err := <-del:
		t.Fatalf("checkpoint.delete returned %v in the middle of the session's rollback", err)
	case <-time.After(blocked):
	}
	close(o.release)
	start := time.Now()
	if err := await(t, "session.rollback", rollback); err != nil || rolled == nil {
		t.Fatalf("rollback = %v; want done (the run's end acts under the rollback's lock)", err)
	}
	// Without the lent lock the end's fence would wait until the rollback's kill timed out.
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("rollback took %v after the run's end was released; the end waited for the rollback's lock", d)
	}
	if err := await(t, "checkpoint.delete", del); !errors.Is(err, fence.ErrFenced) {
		t.Errorf("checkpoint.delete after the rollback = %v; want refused for the fence the run's end made", err)
	}
	if _, err := s.GetCheckpoint("a", "s1", "c1"); err != nil {
		t.Errorf("the refused delete deleted the checkpoint: %v", err)
	}
	if st, err := s.Run(run.RunID); err != nil || st.State != tracked.StateKilled {
		t.Errorf("run after the rollback: %+v, %v; want killed", st, err)
	}
}

// beginObserver fails the run's start as the system-effects observer does when it cannot begin:
// it fences the session first.
type beginObserver struct{ s *Service }

func (o beginObserver) Begin(st *tracked.Status) (json.RawMessage, error) {
	return nil, errors.Join(o.s.FenceFault(st.AgentID, st.SessionID, "observer could not begin", ""), errors.New("observer could not begin"))
}
func (beginObserver) Residue(*tracked.Status) error { return nil }
func (beginObserver) End(*tracked.Status, error) (json.RawMessage, error) {
	return nil, nil
}

// TestRunStartFenceUnderStartLock: an observer that fences the session from Begin (inside
// process.start, which holds the session's lock) does so under the start's lock, and the start
// fails closed instead of hanging.
func TestRunStartFenceUnderStartLock(t *testing.T) {
	s := newService(t)
	start := returns(func() error {
		_, err := s.StartProcess(context.Background(), tracked.StartRequest{AgentID: "a", SessionID: "s1",
			Argv: []string{"/bin/true"}, Hooks: []tracked.Hook{{Name: "observer", Observer: beginObserver{s}, Frozen: true}}})
		return err
	})
	if err := await(t, "process.start", start); err == nil {
		t.Fatal("a start whose observer could not begin succeeded")
	}
	if _, ok := s.FenceOf("a", "s1"); !ok {
		t.Error("the observer's fence is missing")
	}
	if n := s.ActiveRuns("a", "s1"); n != 0 {
		t.Errorf("%d live runs after a failed start", n)
	}
}
