package workspace

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/allox-os/allox/services/internal/store"
)

// TestLeaseHoldsOffRollback: a rollback waits for the session's leases (a share transfer's);
// while it waits or runs, a new lease of that session is refused with ErrSessionBusy, and the
// other session's is not; a lease does not hold off the session's other changes (a checkpoint).
func TestLeaseHoldsOffRollback(t *testing.T) {
	s := newService(t)
	release, err := s.Lease("a", "s1")
	if err != nil {
		t.Fatalf("Lease on a quiet session: %v", err)
	}
	second, err := s.Lease("a", "s1")
	if err != nil {
		t.Fatalf("a second Lease beside the first: %v", err)
	}
	second()
	second() // a release is idempotent: the count must not go below the first lease's
	if _, err := s.CreateCheckpoint("a", "s1", "c2", store.CheckpointOptions{}); err != nil {
		t.Fatalf("a checkpoint while a lease is held: %v", err)
	}
	rolled := returns(func() error { _, err := s.Rollback(context.Background(), "a", "s1", "c1", nil); return err })
	select {
	case err := <-rolled:
		t.Fatalf("Rollback returned (%v) while a lease was held; it must wait", err)
	case <-time.After(blocked):
	}
	if _, err := s.Lease("a", "s1"); !errors.Is(err, ErrSessionBusy) {
		t.Fatalf("Lease during a rollback = %v, want ErrSessionBusy", err)
	}
	other, err := s.Lease("a", "s2")
	if err != nil {
		t.Fatalf("Lease on another session during the rollback: %v", err)
	}
	other()
	release()
	if err := await(t, "Rollback", rolled); err != nil {
		t.Fatalf("Rollback after the lease's release: %v", err)
	}
	again, err := s.Lease("a", "s1")
	if err != nil {
		t.Fatalf("Lease after the rollback: %v", err)
	}
	again()
}
