package store

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// btrfsCmd runs btrfs-progs as root, as a managed run (or an old workspace's tooling) would.
func btrfsCmd(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("btrfs", args...).CombinedOutput(); err != nil {
		t.Fatalf("btrfs %v: %v: %s", args, err, out)
	}
}

// plantNested makes current/x/y and current/x/y/z (nested subvolumes with files) and a read-only
// current/ro holding current/ro/inner: what a hostile managed run can leave in current/.
func plantNested(t *testing.T, current string) {
	t.Helper()
	write(t, filepath.Join(current, "x/plain.txt"), "plain")
	btrfsCmd(t, "subvolume", "create", filepath.Join(current, "x/y"))
	write(t, filepath.Join(current, "x/y/data.txt"), "nested")
	btrfsCmd(t, "subvolume", "create", filepath.Join(current, "x/y/z"))
	write(t, filepath.Join(current, "x/y/z/deep.txt"), "deeper")
	btrfsCmd(t, "subvolume", "create", filepath.Join(current, "ro"))
	btrfsCmd(t, "subvolume", "create", filepath.Join(current, "ro/inner"))
	btrfsCmd(t, "property", "set", "-ts", filepath.Join(current, "ro"), "ro", "true")
}

func journalLen(t *testing.T, s *Store) int {
	t.Helper()
	j, err := os.ReadDir(filepath.Join(s.stateDir, journalDir))
	if err != nil {
		t.Fatal(err)
	}
	return len(j)
}

// The finding: a nested subvolume made session.delete fail ENOTEMPTY after the checkpoints were
// gone, and the journaled delete then stopped every start.
func TestDeleteSessionWithNestedSubvolumes(t *testing.T) {
	s, s1, s2, _ := fixture(t)
	if _, err := s.CreateCheckpoint("a", "s1", "c1", CheckpointOptions{}); err != nil {
		t.Fatal(err)
	}
	plantNested(t, s1.Current)
	other := tree(t, s2.Current)
	if err := s.DeleteSession("a", "s1"); err != nil {
		t.Fatalf("DeleteSession with nested subvolumes: %v", err)
	}
	if _, err := os.Lstat(filepath.Dir(s1.Current)); !os.IsNotExist(err) {
		t.Errorf("session dir left: %v", err)
	}
	if n := journalLen(t, s); n != 0 {
		t.Errorf("journal holds %d entries after the delete", n)
	}
	r := reopen(t, s)
	if _, err := r.GetSession("a", "s1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("deleted session: %v, want ErrNotFound", err)
	}
	if diff := cmp.Diff(other, tree(t, s2.Current)); diff != "" {
		t.Errorf("other session changed:\n%s", diff)
	}
}

// Every rollback of a session with a nested subvolume leaked the old current/.
func TestRollbackDeletesNestedSubvolumesOfOldCurrent(t *testing.T) {
	for _, mode := range []DeleteMode{DeleteNow, DeleteInBackground} {
		t.Run([]string{"now", "background"}[mode], func(t *testing.T) {
			s, s1, _, _ := fixture(t)
			s.SetDeleteMode(mode)
			if _, err := s.CreateCheckpoint("a", "s1", "c1", CheckpointOptions{}); err != nil {
				t.Fatal(err)
			}
			want := tree(t, s1.Current)
			plantNested(t, s1.Current)
			if _, err := s.Rollback(context.Background(), "a", "s1", "c1"); err != nil {
				t.Fatalf("Rollback over nested subvolumes: %v", err)
			}
			s.WaitDeletes()
			if diff := cmp.Diff(want, tree(t, s1.Current)); diff != "" {
				t.Errorf("current/ after rollback (-want +got):\n%s", diff)
			}
			if st := strays(t, s1.Current); len(st) > 0 {
				t.Errorf("old current/ leaked: %v", st)
			}
			if n := journalLen(t, s); n != 0 {
				t.Errorf("journal holds %d entries after the rollback", n)
			}
		})
	}
}

// A snapshot is not recursive: a checkpoint of a current/ with nested subvolumes would silently
// hold empty directories in their place. It is refused, naming the path.
func TestCheckpointRefusesNestedSubvolume(t *testing.T) {
	s, s1, _, _ := fixture(t)
	btrfsCmd(t, "subvolume", "create", filepath.Join(s1.Current, "dir/sub"))
	_, err := s.CreateCheckpoint("a", "s1", "c1", CheckpointOptions{})
	if !errors.Is(err, ErrConflict) {
		t.Fatalf("CreateCheckpoint = %v, want ErrConflict", err)
	}
	for _, want := range []string{"current/dir/sub is a nested Btrfs subvolume", "btrfs subvolume delete"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if _, err := s.GetCheckpoint("a", "s1", "c1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("refused checkpoint in the index: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(filepath.Dir(s1.Current), "checkpoints", "c1")); !os.IsNotExist(err) {
		t.Errorf("refused checkpoint's snapshot exists: %v", err)
	}
	btrfsCmd(t, "subvolume", "delete", filepath.Join(s1.Current, "dir/sub"))
	if _, err := s.CreateCheckpoint("a", "s1", "c1", CheckpointOptions{}); err != nil {
		t.Errorf("checkpoint once the nested subvolume is gone: %v", err)
	}
}

// failAt makes the deletion of one subvolume fail, as a real one can (EIO, EPERM).
func failAt(step string) func(string) error {
	return func(s string) error {
		if s == step {
			return errors.New("injected deletion failure")
		}
		return nil
	}
}

// A delete that fails half-way leaves an index that names only the subvolumes that still
// exist, and a quarantined session that a second delete finishes.
func TestFailedDeleteKeepsIndexTruthful(t *testing.T) {
	s, s1, s2, _ := fixture(t)
	for _, id := range []string{"c1", "c2", "c3"} {
		if _, err := s.CreateCheckpoint("a", "s1", id, CheckpointOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	s.SetStepHook(failAt(stepSubvolDelete + " checkpoints/c2"))
	err := s.DeleteSession("a", "s1")
	if err == nil || !strings.Contains(err.Error(), "injected") {
		t.Fatalf("DeleteSession = %v, want the injected failure", err)
	}
	cps, err := s.ListCheckpoints("a", "s1")
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, c := range cps {
		ids = append(ids, c.ID)
		if _, err := os.Lstat(c.Path); err != nil {
			t.Errorf("index names checkpoint %s whose snapshot is gone: %v", c.ID, err)
		}
	}
	if diff := cmp.Diff([]string{"c2", "c3"}, ids); diff != "" {
		t.Errorf("checkpoints in the index (-want +got):\n%s", diff)
	}
	if cps[0].Parent != "" {
		t.Errorf("c2's parent = %q, want none (c1 is gone)", cps[0].Parent)
	}
	sess, err := s.GetSession("a", "s1")
	if err != nil || sess.Quarantine == nil || !strings.Contains(sess.Quarantine.Reason, "injected") {
		t.Fatalf("session after the failed delete: %+v, %v; want it quarantined with the reason", sess, err)
	}
	if _, err := s.CreateCheckpoint("a", "s1", "c4", CheckpointOptions{}); !errors.Is(err, ErrQuarantined) {
		t.Errorf("checkpoint of a quarantined session: %v, want ErrQuarantined", err)
	}
	if _, err := s.CreateCheckpoint("a", "s2", "ok", CheckpointOptions{}); err != nil {
		t.Errorf("other session: %v", err)
	}
	s.SetStepHook(nil)
	if err := s.DeleteSession("a", "s1"); err != nil {
		t.Fatalf("second DeleteSession: %v", err)
	}
	if q := s.Quarantined(); len(q) != 0 {
		t.Errorf("quarantine after the delete: %+v", q)
	}
	if _, err := os.Lstat(filepath.Dir(s1.Current)); !os.IsNotExist(err) {
		t.Errorf("session dir left: %v", err)
	}
	r := reopen(t, s)
	if _, err := r.GetSession("a", "s2"); err != nil {
		t.Error(err)
	}
	_ = s2
}

// A daemon SIGKILLed in the middle of deleting nested subvolumes: the next start finishes it.
func TestSIGKILLDuringNestedDelete(t *testing.T) {
	for _, step := range []string{stepSubvolDelete + " current/x/y/z", stepSubvolDelete + " current", stepDelIndex} {
		t.Run(step, func(t *testing.T) {
			s, s1, s2, _ := fixture(t)
			if _, err := s.CreateCheckpoint("a", "s1", "c1", CheckpointOptions{}); err != nil {
				t.Fatal(err)
			}
			plantNested(t, s1.Current)
			other := tree(t, s2.Current)
			s.Close()
			cmd := exec.Command(os.Args[0], "-test.run=^TestSIGKILLChild$", "-test.count=1")
			cmd.Env = append(os.Environ(), "STORE_ROOT="+s.root, "STORE_STATE="+s.stateDir, "STORE_STEP="+step, "STORE_OP=delete-session")
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ProcessState.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Fatalf("child: %v, want killed by SIGKILL; output:\n%s", err, out)
			}
			r := reopen(t, s)
			if q := r.Quarantined(); len(q) != 0 {
				t.Errorf("quarantined after recovery: %+v", q)
			}
			if _, err := r.GetSession("a", "s1"); !errors.Is(err, ErrNotFound) {
				t.Errorf("session after recovery: %v, want ErrNotFound (rolled forward)", err)
			}
			if _, err := os.Lstat(filepath.Dir(s1.Current)); !os.IsNotExist(err) {
				t.Errorf("session dir left: %v", err)
			}
			if diff := cmp.Diff(other, tree(t, s2.Current)); diff != "" {
				t.Errorf("other session changed:\n%s", diff)
			}
		})
	}
}
