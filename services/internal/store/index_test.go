package store

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func indexJSON(t *testing.T, s *Store) string {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	b, err := jsonIndent(s.ix)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func mustNotExist(t *testing.T, paths ...string) {
	t.Helper()
	for _, p := range paths {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s: %v, want it gone", p, err)
		}
	}
}

// TestMigrateIndex turns a store's index back into the single index.json of earlier versions
// and opens it, once straight and once after a crash at each step of the migration: the index
// is the same, index.json and the build directory are gone, and the store works.
func TestMigrateIndex(t *testing.T) {
	for _, crash := range []string{"", "session a/s1", "rename", "remove-old"} {
		t.Run("crash="+crash, func(t *testing.T) {
			s, _, _, _ := fixture(t)
			root, state := s.root, s.stateDir
			if _, err := s.CreateCheckpoint("a", "s1", "c1", CheckpointOptions{Labels: map[string]string{"k": "v"}, Pin: true}); err != nil {
				t.Fatal(err)
			}
			if _, err := s.CreateCheckpoint("a", "s1", "c2", CheckpointOptions{}); err != nil {
				t.Fatal(err)
			}
			if _, err := s.CreateAgent("b"); err != nil {
				t.Fatal(err)
			}
			want := indexJSON(t, s)
			s.Close()
			if err := os.WriteFile(filepath.Join(state, indexFile), []byte(want), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.RemoveAll(filepath.Join(state, indexDir)); err != nil {
				t.Fatal(err)
			}
			if crash != "" {
				migrateHook = crashAt(crash)
				_, err := Open(root, state)
				migrateHook = nil
				if !errors.Is(err, errCrash) {
					t.Fatalf("Open with a crash at %s: %v", crash, err)
				}
			}
			r, err := Open(root, state)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { r.Close() })
			if diff := cmp.Diff(want, indexJSON(t, r)); diff != "" {
				t.Errorf("index after migration (-want +got):\n%s", diff)
			}
			mustNotExist(t, filepath.Join(state, indexFile), filepath.Join(state, migrateDir))
			for _, p := range []string{agentsFile, sessionsDir + "/a/s1.json", sessionsDir + "/a/s2.json", sessionsDir + "/b"} {
				if _, err := os.Lstat(filepath.Join(state, indexDir, p)); err != nil {
					t.Errorf("new layout: %v", err)
				}
			}
			if _, err := r.CreateCheckpoint("a", "s1", "c3", CheckpointOptions{}); err != nil {
				t.Fatal(err)
			}
			r2 := reopen(t, r)
			if c, err := r2.GetCheckpoint("a", "s1", "c3"); err != nil || c.Parent != "c2" {
				t.Errorf("checkpoint after migration and reopen: %+v, %v", c, err)
			}
		})
	}
}

// TestCrashBetweenIndexFiles crashes the operations that touch two index entries (agent.create:
// its index directory, then agents.json; agent.delete: agents.json, then the directory) between
// them, and the session operations at their one file with a half-written temporary beside it.
func TestCrashBetweenIndexFiles(t *testing.T) {
	t.Run("agent.create", func(t *testing.T) {
		s, root, state := newStore(t)
		s.SetStepHook(crashAt(stepIndexWrite + " " + agentsFile))
		if _, err := s.CreateAgent("b"); !errors.Is(err, errCrash) {
			t.Fatalf("CreateAgent with a crash before agents.json: %v", err)
		}
		if _, err := os.Lstat(filepath.Join(state, indexDir, sessionsDir, "b")); err != nil {
			t.Fatalf("the crash came before the agent's index directory was made: %v", err)
		}
		r := reopen(t, s)
		if _, err := r.GetAgent("b"); !errors.Is(err, ErrNotFound) {
			t.Errorf("half-made agent: %v, want ErrNotFound", err)
		}
		mustNotExist(t, filepath.Join(state, indexDir, sessionsDir, "b"), filepath.Join(root, agentRel("b")))
		if _, err := r.CreateAgent("b"); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("agent.delete", func(t *testing.T) {
		s, root, state := newStore(t)
		if _, err := s.CreateAgent("b"); err != nil {
			t.Fatal(err)
		}
		s.SetStepHook(crashAt(stepIndexWrite + " agent-dir b"))
		if err := s.DeleteAgent("b"); !errors.Is(err, errCrash) {
			t.Fatalf("DeleteAgent with a crash after agents.json: %v", err)
		}
		r := reopen(t, s)
		if _, err := r.GetAgent("b"); !errors.Is(err, ErrNotFound) {
			t.Errorf("deleted agent: %v, want ErrNotFound", err)
		}
		mustNotExist(t, filepath.Join(state, indexDir, sessionsDir, "b"), filepath.Join(root, agentRel("b")))
		if names, _ := os.ReadDir(filepath.Join(root, "agents")); len(names) != 0 {
			t.Errorf("agents/ after recovery: %v", names)
		}
		if _, err := r.CreateAgent("b"); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("checkpoint", func(t *testing.T) {
		s, s1, _, _ := fixture(t)
		other := indexFileOf(t, s, "a", "s2")
		s.SetStepHook(crashAt(stepIndexWrite + " session a/s1"))
		if _, err := s.CreateCheckpoint("a", "s1", "c1", CheckpointOptions{}); !errors.Is(err, errCrash) {
			t.Fatalf("CreateCheckpoint with a crash at its index file: %v", err)
		}
		half := filepath.Join(s.stateDir, indexDir, sessionsDir, "a", ".s1.json.tmp-123")
		if err := os.WriteFile(half, []byte(`{"created":`), 0o600); err != nil {
			t.Fatal(err)
		}
		r := reopen(t, s)
		if _, err := r.GetCheckpoint("a", "s1", "c1"); !errors.Is(err, ErrNotFound) {
			t.Errorf("half-made checkpoint: %v, want ErrNotFound", err)
		}
		mustNotExist(t, half, filepath.Join(filepath.Dir(s1.Current), "checkpoints", "c1"))
		if got := indexFileOf(t, r, "a", "s2"); got != other {
			t.Errorf("the other session's index file changed:\n%s\nwas\n%s", got, other)
		}
		if _, err := r.CreateCheckpoint("a", "s1", "c1", CheckpointOptions{}); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("session.delete", func(t *testing.T) {
		s, s1, _, _ := fixture(t)
		s.SetStepHook(crashAt(stepIndexWrite + " session a/s1"))
		if err := s.DeleteSession("a", "s1"); !errors.Is(err, errCrash) {
			t.Fatalf("DeleteSession with a crash at its index file: %v", err)
		}
		r := reopen(t, s)
		if _, err := r.GetSession("a", "s1"); !errors.Is(err, ErrNotFound) {
			t.Errorf("session after recovery: %v, want ErrNotFound (rolled forward)", err)
		}
		mustNotExist(t, r.sessionFile("a", "s1"), filepath.Dir(s1.Current))
		if _, err := r.GetSession("a", "s2"); err != nil {
			t.Errorf("other session: %v", err)
		}
	})
}

func indexFileOf(t *testing.T, s *Store, agentID, sessionID string) string {
	t.Helper()
	b, err := os.ReadFile(s.sessionFile(agentID, sessionID))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestIndexWritesOnlyTheTouchedFiles checks that an operation of one session rewrites only that
// session's index file.
func TestIndexWritesOnlyTheTouchedFiles(t *testing.T) {
	s, _, _, _ := fixture(t)
	var written []string
	s.SetStepHook(func(step string) error {
		if f, ok := strings.CutPrefix(step, stepIndexWrite+" "); ok {
			written = append(written, f)
		}
		return nil
	})
	if _, err := s.CreateCheckpoint("a", "s2", "c1", CheckpointOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := s.Pin("a", "s2", "c1", true); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateAgent("b"); err != nil {
		t.Fatal(err)
	}
	want := []string{"session a/s2", "session a/s2", agentsFile}
	if diff := cmp.Diff(want, written); diff != "" {
		t.Errorf("index files written (-want +got):\n%s", diff)
	}
}

// TestOrphanedSessionFilesAreNotInherited puts a session file in the index directory of an
// agent agents.json does not name: Open moves it out of agents/, and an agent created with that
// id has no sessions.
func TestOrphanedSessionFilesAreNotInherited(t *testing.T) {
	s, root, state := newStore(t)
	s.Close()
	dir := filepath.Join(state, indexDir, sessionsDir, "b")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "s1.json"), []byte(`{"checkpoints":{}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := Open(root, state)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	mustNotExist(t, dir)
	if _, err := r.CreateAgent("b"); err != nil {
		t.Fatal(err)
	}
	r2 := reopen(t, r)
	if ss, err := r2.ListSessions("b"); err != nil || len(ss) != 0 {
		t.Errorf("sessions of the new agent b: %v, %v; want none", ss, err)
	}
}
