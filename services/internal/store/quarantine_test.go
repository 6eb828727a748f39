package store

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// stuckSession leaves s1 with a rollback in the journal that recovery cannot finish: the crash
// came before the exchange, and then someone replaced current/ by a subvolume of their own.
func stuckSession(t *testing.T) (*Store, *Session, *Session) {
	t.Helper()
	s, s1, s2, _ := fixture(t)
	if _, err := s.CreateCheckpoint("a", "s1", "c1", CheckpointOptions{}); err != nil {
		t.Fatal(err)
	}
	s.SetStepHook(crashAt(stepRbExchange))
	if _, err := s.Rollback(context.Background(), "a", "s1", "c1"); !errors.Is(err, errCrash) {
		t.Fatalf("Rollback with crash: %v", err)
	}
	s.Close()
	btrfsCmd(t, "subvolume", "delete", s1.Current)
	btrfsCmd(t, "subvolume", "create", s1.Current)
	return s, s1, s2
}

func TestStartQuarantinesUnrecoverableSession(t *testing.T) {
	s, s1, s2 := stuckSession(t)
	r, err := Open(s.root, s.stateDir)
	if err != nil {
		t.Fatalf("Open with one unrecoverable session: %v; want the rest served", err)
	}
	q := r.Quarantined()
	if len(q) != 1 || q[0].AgentID != "a" || q[0].SessionID != "s1" || !strings.Contains(q[0].Reason, "rollback") || q[0].Since.IsZero() {
		t.Fatalf("Quarantined = %+v; want a/s1 with the rollback's reason", q)
	}
	sess, err := r.GetSession("a", "s1")
	if err != nil || sess.Quarantine == nil {
		t.Fatalf("GetSession = %+v, %v; want it to show the quarantine", sess, err)
	}
	for name, op := range map[string]func() error{
		"checkpoint.create": func() error { _, err := r.CreateCheckpoint("a", "s1", "c2", CheckpointOptions{}); return err },
		"session.rollback":  func() error { _, err := r.Rollback(context.Background(), "a", "s1", "c1"); return err },
		"checkpoint.delete": func() error { return r.DeleteCheckpoint("a", "s1", "c1") },
		"session.paths":     func() error { _, err := r.RunPaths("a", "s1"); return err },
	} {
		err := op()
		if !errors.Is(err, ErrQuarantined) || !strings.Contains(err.Error(), "session.delete") {
			t.Errorf("%s on the quarantined session: %v; want ErrQuarantined saying how to recover", name, err)
		}
	}
	if err := r.DeleteAgent("a"); !errors.Is(err, ErrConflict) {
		t.Errorf("DeleteAgent with a quarantined session: %v, want ErrConflict", err)
	}
	// Everything else is served.
	if _, err := r.CreateCheckpoint("a", "s2", "c1", CheckpointOptions{}); err != nil {
		t.Errorf("other session's checkpoint: %v", err)
	}
	if _, err := r.Rollback(context.Background(), "a", "s2", "c1"); err != nil {
		t.Errorf("other session's rollback: %v", err)
	}
	// The quarantine, and when it began, survive a restart.
	r.Close()
	r2, err := Open(s.root, s.stateDir)
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	if q2 := r2.Quarantined(); len(q2) != 1 || !q2[0].Since.Equal(q[0].Since) {
		t.Errorf("after restart: %+v; want the same quarantine since %v", q2, q[0].Since)
	}
	// session.delete recovers it.
	if err := r2.DeleteSession("a", "s1"); err != nil {
		t.Fatalf("DeleteSession of the quarantined session: %v", err)
	}
	if q := r2.Quarantined(); len(q) != 0 {
		t.Errorf("still quarantined: %+v", q)
	}
	if n := journalLen(t, r2); n != 0 {
		t.Errorf("journal holds %d entries", n)
	}
	if _, err := os.Lstat(filepath.Dir(s1.Current)); !os.IsNotExist(err) {
		t.Errorf("session dir left: %v", err)
	}
	if _, err := r2.CreateSession("a", "s1"); err != nil {
		t.Errorf("re-create after the delete: %v", err)
	}
	_ = s2
}

func TestOpenWaitsForStateLock(t *testing.T) {
	s, root, state := newStore(t)
	s.Close()
	// Another process holds the lock for a second, as a daemon that is still exiting does.
	holder := exec.Command("flock", "-x", filepath.Join(state, ".lock"), "sleep", "1")
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer holder.Wait()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if b, _ := os.ReadFile("/proc/locks"); strings.Contains(string(b), " "+strconv.Itoa(holder.Process.Pid)+" ") {
			break
		}
	}
	_, err := OpenOptions(root, state, Options{LockWait: 50 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "pid "+strconv.Itoa(holder.Process.Pid)) {
		t.Errorf("Open with a short wait = %v; want it to fail naming the holder's pid %d", err, holder.Process.Pid)
	}
	s2, err := OpenOptions(root, state, Options{LockWait: 20 * time.Second})
	if err != nil {
		t.Fatalf("Open waiting for the holder to exit: %v", err)
	}
	s2.Close()
}

func TestOpenRemovesTempFiles(t *testing.T) {
	s, root, state := newStore(t)
	s.Close()
	leftovers := []string{filepath.Join(state, ".index.json.tmp-123"), filepath.Join(state, journalDir, ".1-2.json.tmp-456"),
		filepath.Join(state, indexDir, "."+agentsFile+".tmp-789"), filepath.Join(state, indexDir, sessionsDir, ".x.tmp-1")}
	for _, p := range leftovers {
		if err := os.WriteFile(p, []byte("half"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	s2, err := Open(root, state)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	for _, p := range leftovers {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s left: %v", p, err)
		}
	}
}

func TestCrashDuringCreateAgentLeavesNoDirectory(t *testing.T) {
	for _, step := range []string{stepAgentDirs, stepAgentIndex} {
		t.Run(step, func(t *testing.T) {
			s, root, _ := newStore(t)
			s.SetStepHook(crashAt(step))
			if _, err := s.CreateAgent("b"); !errors.Is(err, errCrash) {
				t.Fatalf("CreateAgent with crash at %s: %v", step, err)
			}
			if step == stepAgentIndex {
				if _, err := os.Lstat(filepath.Join(root, "agents", "b")); err != nil {
					t.Fatalf("the crash should leave the directory for recovery: %v", err)
				}
			}
			r := reopen(t, s)
			if _, err := os.Lstat(filepath.Join(root, "agents", "b")); !os.IsNotExist(err) {
				t.Errorf("agent dir of the failed create left: %v", err)
			}
			if _, err := r.CreateAgent("b"); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestStartEmptiesRunTmpStaging(t *testing.T) {
	s, s1, _, _ := fixture(t)
	p, err := s.RunPaths("a", "s1")
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(p.RunTmp, "r1", "big"), "stale")
	r := reopen(t, s)
	if ents, err := os.ReadDir(p.RunTmp); err != nil || len(ents) != 0 {
		t.Errorf("staging after restart: %v, %v; want it empty", ents, err)
	}
	if err := r.DeleteSession("a", "s1"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Dir(s1.Current)); !os.IsNotExist(err) {
		t.Errorf("session dir (with .run-tmp) left: %v", err)
	}
}
