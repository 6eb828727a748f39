package store

import (
	"context"
	"errors"

	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestHandover lends the store to a second Open of the same root and state (as the recover binary
// does), which rolls a session back; the lender then sees the result, and while it was lent out
// the lender's own session operations waited instead of racing.
func TestHandover(t *testing.T) {
	s, s1, _, _ := fixture(t)
	want := tree(t, s1.Current)
	if _, err := s.CreateCheckpoint("a", "s1", "c1", CheckpointOptions{}); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(s1.Current, "f.txt"), "changed")

	if _, err := openNoWait(s.root, s.stateDir); err == nil {
		t.Fatal("a second Open succeeded while the store holds its state lock")
	}
	blocked := make(chan error, 1)
	err := s.Handover(func() error {
		go func() { _, err := s.CreateCheckpoint("a", "s1", "during", CheckpointOptions{}); blocked <- err }()
		other, err := Open(s.root, s.stateDir)
		if err != nil {
			return err
		}
		defer other.Close()
		if _, err := other.Rollback(context.Background(), "a", "s1", "c1"); err != nil {
			return err
		}
		if _, err := other.CreateCheckpoint("a", "s1", "by-other", CheckpointOptions{}); err != nil {
			return err
		}
		select {
		case err := <-blocked:
			return errors.New("a session operation ran while the store was lent out: " + errString(err))
		case <-time.After(100 * time.Millisecond):
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-blocked; err != nil {
		t.Errorf("the operation held back during the handover failed afterwards: %v", err)
	}
	if diff := cmp.Diff(want, tree(t, s1.Current)); diff != "" {
		t.Errorf("current/ after the lent-out rollback (-want +got):\n%s", diff)
	}
	if _, err := s.GetCheckpoint("a", "s1", "by-other"); err != nil {
		t.Errorf("the borrower's checkpoint is not in the lender's reloaded index: %v", err)
	}
	if _, err := s.GetCheckpoint("a", "s1", "during"); err != nil {
		t.Errorf("checkpoint made after the handover: %v", err)
	}
}

// TestHandoverErrorKeepsStore checks that a failing borrower leaves the lender usable.
func TestHandoverErrorKeepsStore(t *testing.T) {
	s, _, _, _ := fixture(t)
	boom := errors.New("recover binary refused")
	if err := s.Handover(func() error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("Handover = %v, want the borrower's error", err)
	}
	if _, err := s.CreateCheckpoint("a", "s1", "after", CheckpointOptions{}); err != nil {
		t.Errorf("store unusable after a failed handover: %v", err)
	}
	if _, err := openNoWait(s.root, s.stateDir); err == nil {
		t.Error("the state lock was not taken back")
	}
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}
