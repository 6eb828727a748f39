package store

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// swaps lists the rollback swap subvolumes left in a session's directory and the journal's
// entries.
func swaps(t *testing.T, s *Store, current string) (names []string, journal int) {
	t.Helper()
	ents, err := os.ReadDir(filepath.Dir(current))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if isRollbackSwap(e.Name()) {
			names = append(names, e.Name())
		}
	}
	j, _ := os.ReadDir(filepath.Join(s.stateDir, journalDir))
	return names, len(j)
}

// TestRollbackDeletesInBackground: with DeleteInBackground a rollback returns with current/
// restored and the old copy still journaled or being deleted; the reaper deletes it.
func TestRollbackDeletesInBackground(t *testing.T) {
	s, s1, _, _ := fixture(t)
	s.SetDeleteMode(DeleteInBackground)
	want := tree(t, s1.Current)
	if _, err := s.CreateCheckpoint("a", "s1", "c1", CheckpointOptions{}); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(s1.Current, "f.txt"), "changed")
	release := make(chan struct{})
	s.SetStepHook(func(step string) error {
		if step == stepReap {
			<-release
		}
		return nil
	})
	for range 3 {
		if _, err := s.Rollback(context.Background(), "a", "s1", "c1"); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, tree(t, s1.Current)); diff != "" {
			t.Fatalf("current/ after the rollback (-want +got):\n%s", diff)
		}
	}
	if names, journal := swaps(t, s, s1.Current); len(names) != 3 || journal != 3 {
		t.Errorf("with the reaper held: swaps %v, %d journal entries; want the 3 old copies, journaled", names, journal)
	}
	close(release)
	s.WaitDeletes()
	if names, journal := swaps(t, s, s1.Current); len(names) > 0 || journal > 0 {
		t.Errorf("after the reaper: swap subvolumes %v, %d journal entries; want none", names, journal)
	}
}

// TestDeleteLaterLeavesItJournaled: a store borrowed with DeleteLater (the recover program) leaves
// the old copy and its journal entry; the lender's reload after the Handover has its reaper
// delete it, and a plain Open deletes what a closed store left.
func TestDeleteLaterLeavesItJournaled(t *testing.T) {
	s, s1, _, _ := fixture(t)
	s.SetDeleteMode(DeleteInBackground)
	if _, err := s.CreateCheckpoint("a", "s1", "c1", CheckpointOptions{}); err != nil {
		t.Fatal(err)
	}
	var left []string
	err := s.Handover(func() error {
		other, err := OpenWith(s.root, s.stateDir, DeleteLater)
		if err != nil {
			return err
		}
		defer other.Close()
		_, err = other.Rollback(context.Background(), "a", "s1", "c1")
		var journal int
		if left, journal = swaps(t, other, s1.Current); len(left) != 1 || journal != 1 {
			t.Errorf("borrower left swaps %v and %d journal entries; want one of each", left, journal)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	s.WaitDeletes()
	if names, journal := swaps(t, s, s1.Current); len(names) > 0 || journal > 0 {
		t.Errorf("after the lender's reaper: swaps %v, %d journal entries; want none", names, journal)
	}

	// Left by a store that closed: the next Open deletes it.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	later, err := OpenWith(s.root, s.stateDir, DeleteLater)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := later.Rollback(context.Background(), "a", "s1", "c1"); err != nil {
		t.Fatal(err)
	}
	if names, _ := swaps(t, later, s1.Current); len(names) != 1 || !strings.HasPrefix(names[0], ".rollback-") {
		t.Fatalf("DeleteLater rollback left %v, want one swap", names)
	}
	later.Close()
	again, err := Open(s.root, s.stateDir)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if names, journal := swaps(t, again, s1.Current); len(names) > 0 || journal > 0 {
		t.Errorf("after a plain Open: swaps %v, %d journal entries; want none", names, journal)
	}
}
