package store

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var errCrash = errors.New("simulated crash")

func crashAt(step string) func(string) error {
	return func(s string) error {
		if s == step {
			return errCrash
		}
		return nil
	}
}

// reopen opens the store again on the same root and state, as the daemon does after a crash.
func reopen(t *testing.T, s *Store) *Store {
	t.Helper()
	s.Close() // a crashed daemon's lock is released by the kernel
	s2, err := Open(s.root, s.stateDir)
	if err != nil {
		t.Fatalf("Open after crash: %v", err)
	}
	t.Cleanup(func() { s2.Close() })
	if j, _ := os.ReadDir(filepath.Join(s.stateDir, journalDir)); len(j) > 0 {
		t.Errorf("journal not empty after recovery: %v", j)
	}
	return s2
}

var rollbackSteps = []struct {
	step    string
	applied bool // whether the rollback is in effect after recovery
}{
	{stepRbSnapshot, false},
	{stepRbExchange, false},
	{stepRbIndex, true},
	{stepRbDeleteOld, true},
}

// inProcess crashes the rollback through the step hook.
func inProcess(t *testing.T, s *Store, step string) {
	s.SetStepHook(crashAt(step))
	if _, err := s.Rollback(context.Background(), "a", "s1", "c1"); !errors.Is(err, errCrash) {
		t.Fatalf("Rollback with crash at %s: %v", step, err)
	}
	if _, err := s.Rollback(context.Background(), "a", "s1", "c1"); !errors.Is(err, ErrConflict) {
		t.Errorf("rollback on a session awaiting recovery: %v, want ErrConflict", err)
	}
}

// sigkill runs the rollback in a child process that SIGKILLs itself at the step.
func sigkill(t *testing.T, s *Store, step string) {
	s.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^TestSIGKILLChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), "STORE_ROOT="+s.root, "STORE_STATE="+s.stateDir, "STORE_STEP="+step)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ProcessState.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child: %v, want killed by SIGKILL; output:\n%s", err, out)
	}
}

// TestSIGKILLChild is the child of sigkill; it does nothing unless STORE_STEP is set.
func TestSIGKILLChild(t *testing.T) {
	step := os.Getenv("STORE_STEP")
	if step == "" {
		return // only runs as the child of sigkill
	}
	s, err := Open(os.Getenv("STORE_ROOT"), os.Getenv("STORE_STATE"))
	if err != nil {
		t.Fatal(err)
	}
	s.SetStepHook(func(got string) error {
		if got == step {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
		return nil
	})
	if os.Getenv("STORE_OP") == "delete-session" {
		err = s.DeleteSession("a", "s1")
	} else {
		_, err = s.Rollback(context.Background(), "a", "s1", "c1")
	}
	t.Fatalf("%s returned (%v) instead of dying at %s", os.Getenv("STORE_OP"), err, step)
}

func TestCrashDuringRollback(t *testing.T) {
	modes := []struct {
		name  string
		crash func(*testing.T, *Store, string)
	}{{"hook", inProcess}, {"sigkill", sigkill}}
	for _, mode := range modes {
		for _, tc := range rollbackSteps {
			t.Run(mode.name+"/"+tc.step, func(t *testing.T) {
				s, s1, s2, a := fixture(t)
				if _, err := s.CreateCheckpoint("a", "s1", "c1", CheckpointOptions{}); err != nil {
					t.Fatal(err)
				}
				restored := tree(t, s1.Current)
				write(t, filepath.Join(s1.Current, "f.txt"), "v2")
				write(t, filepath.Join(s1.Current, "new.txt"), "new")
				if _, err := s.CreateCheckpoint("a", "s1", "c2", CheckpointOptions{}); err != nil {
					t.Fatal(err)
				}
				write(t, filepath.Join(s1.Current, "unsaved.txt"), "u")
				old, shared, other := tree(t, s1.Current), tree(t, a.Shared), tree(t, s2.Current)

				mode.crash(t, s, tc.step)
				r := reopen(t, s)
				want, head := old, "c2"
				if tc.applied {
					want, head = restored, "c1"
				}
				if diff := cmp.Diff(want, tree(t, s1.Current)); diff != "" {
					t.Errorf("current/ after recovery (-want +got):\n%s", diff)
				}
				if sess, _ := r.GetSession("a", "s1"); sess.Head != head {
					t.Errorf("head = %q, want %q", sess.Head, head)
				}
				if st := strays(t, s1.Current); len(st) > 0 {
					t.Errorf("stray swap subvolumes: %v", st)
				}
				if diff := cmp.Diff(shared, tree(t, a.Shared)); diff != "" {
					t.Errorf("shared/ changed:\n%s", diff)
				}
				if diff := cmp.Diff(other, tree(t, s2.Current)); diff != "" {
					t.Errorf("other session changed:\n%s", diff)
				}
				cps, _ := r.ListCheckpoints("a", "s1")
				if len(cps) != 2 || cps[1].Parent != "c1" {
					t.Errorf("index after recovery: %+v", cps)
				}
				if diff := cmp.Diff(restored, tree(t, cps[0].Path)); diff != "" {
					t.Errorf("checkpoint c1 changed:\n%s", diff)
				}
				// The recovered store works.
				if _, err := r.Rollback(context.Background(), "a", "s1", "c1"); err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(restored, tree(t, s1.Current)); diff != "" {
					t.Errorf("rollback after recovery (-want +got):\n%s", diff)
				}
			})
		}
	}
}

func TestCrashDuringCheckpoint(t *testing.T) {
	for _, step := range []string{stepCpSnapshot, stepCpIndex} {
		t.Run(step, func(t *testing.T) {
			s, s1, _, _ := fixture(t)
			before := tree(t, s1.Current)
			s.SetStepHook(crashAt(step))
			if _, err := s.CreateCheckpoint("a", "s1", "c1", CheckpointOptions{Pin: true}); !errors.Is(err, errCrash) {
				t.Fatalf("CreateCheckpoint with crash at %s: %v", step, err)
			}
			r := reopen(t, s)
			if _, err := r.GetCheckpoint("a", "s1", "c1"); !errors.Is(err, ErrNotFound) {
				t.Errorf("half-made checkpoint: %v, want ErrNotFound", err)
			}
			if _, err := os.Lstat(filepath.Join(filepath.Dir(s1.Current), "checkpoints", "c1")); !os.IsNotExist(err) {
				t.Errorf("snapshot left behind: %v", err)
			}
			if diff := cmp.Diff(before, tree(t, s1.Current)); diff != "" {
				t.Errorf("current/ changed:\n%s", diff)
			}
			if _, err := r.CreateCheckpoint("a", "s1", "c1", CheckpointOptions{}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestCrashDuringDeleteSession(t *testing.T) {
	for _, step := range []string{stepDelSubvols, stepDelIndex} {
		t.Run(step, func(t *testing.T) {
			s, s1, s2, _ := fixture(t)
			if _, err := s.CreateCheckpoint("a", "s1", "c1", CheckpointOptions{}); err != nil {
				t.Fatal(err)
			}
			other := tree(t, s2.Current)
			s.SetStepHook(crashAt(step))
			if err := s.DeleteSession("a", "s1"); !errors.Is(err, errCrash) {
				t.Fatalf("DeleteSession with crash at %s: %v", step, err)
			}
			r := reopen(t, s)
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

func TestCrashDuringCreateSession(t *testing.T) {
	for _, step := range []string{stepSessSubvol, stepSessIndex} {
		t.Run(step, func(t *testing.T) {
			s, _, s2, _ := fixture(t)
			other := tree(t, s2.Current)
			s.SetStepHook(crashAt(step))
			if _, err := s.CreateSession("a", "s3"); !errors.Is(err, errCrash) {
				t.Fatalf("CreateSession with crash at %s: %v", step, err)
			}
			r := reopen(t, s)
			if _, err := r.GetSession("a", "s3"); !errors.Is(err, ErrNotFound) {
				t.Errorf("half-made session: %v, want ErrNotFound", err)
			}
			if _, err := os.Lstat(filepath.Join(s.root, sessionRel("a", "s3"))); !os.IsNotExist(err) {
				t.Errorf("session dir left: %v", err)
			}
			if diff := cmp.Diff(other, tree(t, s2.Current)); diff != "" {
				t.Errorf("other session changed:\n%s", diff)
			}
			if _, err := r.CreateSession("a", "s3"); err != nil {
				t.Fatal(err)
			}
		})
	}
}
