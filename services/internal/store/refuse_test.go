package store

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestBadRequests(t *testing.T) {
	s, _, _, _ := fixture(t)
	if _, err := s.CreateCheckpoint("a", "s2", "other", CheckpointOptions{}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		err   error
		want  error
		field string
	}{
		{"agent traversal", func() error { _, err := s.CreateAgent("../x"); return err }(), ErrInvalidID, "agent_id"},
		{"agent dot", func() error { _, err := s.CreateAgent(".x"); return err }(), ErrInvalidID, "agent_id"},
		{"agent exists", func() error { _, err := s.CreateAgent("a"); return err }(), ErrExists, "agent_id"},
		{"session slash", func() error { _, err := s.CreateSession("a", "x/y"); return err }(), ErrInvalidID, "session_id"},
		{"session NUL", func() error { _, err := s.CreateSession("a", "x\x00"); return err }(), ErrInvalidID, "session_id"},
		{"session exists", func() error { _, err := s.CreateSession("a", "s1"); return err }(), ErrExists, "session_id"},
		{"session of missing agent", func() error { _, err := s.CreateSession("nobody", "s1"); return err }(), ErrNotFound, "agent_id"},
		{"checkpoint bad id", func() error { _, err := s.CreateCheckpoint("a", "s1", "..", CheckpointOptions{}); return err }(), ErrInvalidID, "checkpoint_id"},
		{"rollback unknown", func() error { _, err := s.Rollback(ctx, "a", "s1", "nope"); return err }(), ErrNotFound, "checkpoint_id"},
		{"rollback to another session's checkpoint", func() error { _, err := s.Rollback(ctx, "a", "s1", "other"); return err }(), ErrNotFound, "checkpoint_id"},
		{"rollback bad id", func() error { _, err := s.Rollback(ctx, "a", "s1", "../s2/checkpoints/other"); return err }(), ErrInvalidID, "checkpoint_id"},
		{"delete unknown checkpoint", s.DeleteCheckpoint("a", "s1", "nope"), ErrNotFound, "checkpoint_id"},
		{"unknown session", func() error { _, err := s.GetSession("a", "s9"); return err }(), ErrNotFound, "session_id"},
	} {
		var e *Error
		if !errors.Is(tc.err, tc.want) || !errors.As(tc.err, &e) || e.Field != tc.field {
			t.Errorf("%s: err = %v, want %v naming %s", tc.name, tc.err, tc.want, tc.field)
		}
	}
	if ags, _ := s.ListAgents(); len(ags) != 1 {
		t.Errorf("agents after bad requests: %d, want 1", len(ags))
	}
}

// TestReplacedCurrent replaces current/ with a symlink out of the workspace and with a plain
// directory: checkpoint, rollback and delete refuse, and nothing is deleted on either side.
func TestReplacedCurrent(t *testing.T) {
	for _, kind := range []string{"symlink", "plain dir"} {
		t.Run(kind, func(t *testing.T) {
			s, s1, _, _ := fixture(t)
			if _, err := s.CreateCheckpoint("a", "s1", "c1", CheckpointOptions{}); err != nil {
				t.Fatal(err)
			}
			outside := t.TempDir()
			write(t, filepath.Join(outside, "victim.txt"), "precious")
			// The real subvolume is moved aside (as an agent could not, but a bug might).
			aside := filepath.Join(filepath.Dir(s1.Current), "moved")
			if err := os.Rename(s1.Current, aside); err != nil {
				t.Fatal(err)
			}
			if kind == "symlink" {
				if err := os.Symlink(outside, s1.Current); err != nil {
					t.Fatal(err)
				}
			} else {
				write(t, filepath.Join(s1.Current, "decoy.txt"), "decoy")
			}
			before := tree(t, filepath.Dir(s1.Current))
			victim := tree(t, outside)
			ctx := context.Background()
			errs := map[string]error{
				"checkpoint": func() error { _, err := s.CreateCheckpoint("a", "s1", "c2", CheckpointOptions{}); return err }(),
				"rollback":   func() error { _, err := s.Rollback(ctx, "a", "s1", "c1"); return err }(),
				"delete":     s.DeleteSession("a", "s1"),
			}
			for op, err := range errs {
				if !errors.Is(err, ErrConflict) {
					t.Errorf("%s on replaced current/: %v, want ErrConflict", op, err)
				}
			}
			if diff := cmp.Diff(before, tree(t, filepath.Dir(s1.Current))); diff != "" {
				t.Errorf("session dir changed (-before +after):\n%s", diff)
			}
			if diff := cmp.Diff(victim, tree(t, outside)); diff != "" {
				t.Errorf("outside dir changed (-before +after):\n%s", diff)
			}
			if cps, _ := s.ListCheckpoints("a", "s1"); len(cps) != 1 {
				t.Errorf("checkpoints = %d, want 1", len(cps))
			}
		})
	}
}

// TestRollbackUndo: a rollback that fails for a real reason (here: cancelled after the snapshot)
// undoes itself at once; a checkpoint it is restoring from cannot be deleted meanwhile.
func TestRollbackUndo(t *testing.T) {
	s, s1, _, _ := fixture(t)
	if _, err := s.CreateCheckpoint("a", "s1", "c1", CheckpointOptions{}); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(s1.Current, "f.txt"), "v2")
	before := tree(t, s1.Current)
	ctx, cancel := context.WithCancel(context.Background())
	var delErr error
	s.SetStepHook(func(step string) error {
		if step == stepRbSnapshot {
			delErr = s.DeleteCheckpoint("a", "s1", "c1")
			cancel()
		}
		return nil
	})
	if _, err := s.Rollback(ctx, "a", "s1", "c1"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Rollback: %v, want context.Canceled", err)
	}
	if !errors.Is(delErr, ErrConflict) {
		t.Errorf("delete during rollback: %v, want ErrConflict", delErr)
	}
	if diff := cmp.Diff(before, tree(t, s1.Current)); diff != "" {
		t.Errorf("current/ changed (-before +after):\n%s", diff)
	}
	if st := strays(t, s1.Current); len(st) > 0 {
		t.Errorf("stray swap subvolumes: %v", st)
	}
	if j, _ := os.ReadDir(filepath.Join(s.stateDir, journalDir)); len(j) > 0 {
		t.Errorf("journal not empty: %v", j)
	}
	s.SetStepHook(nil)
	if err := s.DeleteCheckpoint("a", "s1", "c1"); err != nil {
		t.Errorf("delete after rollback: %v", err)
	}
}
