package store

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// fixture: agent "a" with sessions s1 and s2, files in shared/, s1 and s2.
func fixture(t *testing.T) (s *Store, s1, s2 *Session, a *Agent) {
	t.Helper()
	s, _, _ = newStore(t)
	a, err := s.CreateAgent("a")
	if err != nil {
		t.Fatal(err)
	}
	if s1, err = s.CreateSession("a", "s1"); err != nil {
		t.Fatal(err)
	}
	if s2, err = s.CreateSession("a", "s2"); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(a.Shared, "notes.txt"), "shared")
	write(t, filepath.Join(s1.Current, "f.txt"), "v1")
	write(t, filepath.Join(s1.Current, "dir/g.txt"), "g1")
	write(t, filepath.Join(s2.Current, "other.txt"), "other")
	return s, s1, s2, a
}

func TestRollbackRestores(t *testing.T) {
	s, s1, s2, a := fixture(t)
	want := tree(t, s1.Current)
	if _, err := s.CreateCheckpoint("a", "s1", "c1", CheckpointOptions{Labels: map[string]string{"turn": "1"}}); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(s1.Current, "f.txt"), "v2")
	write(t, filepath.Join(s1.Current, "new.txt"), "new")
	os.Remove(filepath.Join(s1.Current, "dir/g.txt"))
	write(t, filepath.Join(a.Shared, "later.txt"), "kept")
	write(t, filepath.Join(s2.Current, "s2-later.txt"), "kept")
	shared, other := tree(t, a.Shared), tree(t, s2.Current)

	sess, err := s.Rollback(context.Background(), "a", "s1", "c1")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, tree(t, s1.Current)); diff != "" {
		t.Errorf("current/ after rollback (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(shared, tree(t, a.Shared)); diff != "" {
		t.Errorf("shared/ changed (-before +after):\n%s", diff)
	}
	if diff := cmp.Diff(other, tree(t, s2.Current)); diff != "" {
		t.Errorf("other session changed (-before +after):\n%s", diff)
	}
	if sess.Head != "c1" {
		t.Errorf("head = %q, want c1", sess.Head)
	}
	if st := strays(t, s1.Current); len(st) > 0 {
		t.Errorf("stray swap subvolumes: %v", st)
	}
	// current/ is writable again and still a subvolume.
	write(t, filepath.Join(s1.Current, "after.txt"), "x")
	if _, err := s.CreateCheckpoint("a", "s1", "c2", CheckpointOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestCheckpointDAG(t *testing.T) {
	s, _, _, _ := fixture(t)
	ctx := context.Background()
	mk := func(id string) {
		t.Helper()
		if _, err := s.CreateCheckpoint("a", "s1", id, CheckpointOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	mk("c1")
	mk("c2")
	if _, err := s.Rollback(ctx, "a", "s1", "c1"); err != nil {
		t.Fatal(err)
	}
	mk("c3")
	parents := func() map[string]string {
		cps, err := s.ListCheckpoints("a", "s1")
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]string{}
		for _, c := range cps {
			m[c.ID] = c.Parent
		}
		return m
	}
	if diff := cmp.Diff(map[string]string{"c1": "", "c2": "c1", "c3": "c1"}, parents()); diff != "" {
		t.Errorf("DAG (-want +got):\n%s", diff)
	}
	if err := s.DeleteCheckpoint("a", "s1", "c1"); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]string{"c2": "", "c3": ""}, parents()); diff != "" {
		t.Errorf("DAG after deleting c1 (-want +got):\n%s", diff)
	}
	// The index survives a restart.
	s.Close()
	s2, err := Open(s.root, s.stateDir)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if sess, _ := s2.GetSession("a", "s1"); sess.Head != "c3" {
		t.Errorf("head after reopen = %q, want c3", sess.Head)
	}
}

func TestPinned(t *testing.T) {
	s, _, _, _ := fixture(t)
	if _, err := s.CreateCheckpoint("a", "s1", "base", CheckpointOptions{Pin: true}); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteCheckpoint("a", "s1", "base"); !errors.Is(err, ErrPinned) {
		t.Errorf("delete pinned checkpoint: %v, want ErrPinned", err)
	}
	if err := s.DeleteSession("a", "s1"); !errors.Is(err, ErrPinned) {
		t.Errorf("delete session with pinned checkpoint: %v, want ErrPinned", err)
	}
	if _, err := s.GetCheckpoint("a", "s1", "base"); err != nil {
		t.Errorf("pinned checkpoint gone: %v", err)
	}
	if err := s.Pin("a", "s1", "base", false); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteSession("a", "s1"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteAgent("a"); !errors.Is(err, ErrConflict) {
		t.Errorf("delete agent with a session: %v, want ErrConflict", err)
	}
	if err := s.DeleteSession("a", "s2"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteAgent("a"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(s.root, "agents", "a")); !os.IsNotExist(err) {
		t.Errorf("agent dir left: %v", err)
	}
}

func TestOpenRefuses(t *testing.T) {
	s, root, state := newStore(t)
	if _, err := openNoWait(root, state); err == nil {
		t.Error("second Open on the same state dir: want error")
	}
	if _, err := Open(root, filepath.Join(root, "agents", "x")); err == nil {
		t.Error("state dir inside agents/: want error")
	}
	if _, err := Open(t.TempDir(), t.TempDir()); err == nil {
		t.Error("root not on Btrfs: want error")
	}
	s.Close()
	s2, err := Open(root, state)
	if err != nil {
		t.Fatalf("Open after Close: %v", err)
	}
	s2.Close()
}
