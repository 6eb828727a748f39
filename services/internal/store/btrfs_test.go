package store

import (
	"github.com/allox-os/allox/internal/testenv"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/allox-os/allox/internal/btrfstest"
)

// testFS is the mount point of a loop-mounted Btrfs image shared by the package's tests;
// skipWhy says why there is none.
var testFS, skipWhy string

func TestMain(m *testing.M) {
	if os.Getenv("STORE_STEP") != "" { // a child of sigkill: it dies before it could unmount
		os.Exit(m.Run())
	}
	dir, cleanup, err := btrfstest.New("")
	if err != nil {
		skipWhy = err.Error()
	}
	testFS = dir
	code := m.Run()
	cleanup()
	os.Exit(code)
}

// needBtrfs skips (or, in CI, fails) when there is no test filesystem.
func needBtrfs(tb testing.TB) {
	tb.Helper()
	if skipWhy == "" {
		return
	}
	testenv.Unavailable(tb, "no real Btrfs: %s", skipWhy)
}

// newStore opens a fresh store on the test filesystem, its state dir outside it.
func newStore(tb testing.TB) (s *Store, root, state string) {
	tb.Helper()
	needBtrfs(tb)
	root, err := os.MkdirTemp(testFS, "root-")
	if err != nil {
		tb.Fatal(err)
	}
	state = tb.TempDir()
	s, err = Open(root, state)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s, root, state
}

// tree reads every file and symlink below dir into path → content (or "-> target").
func tree(tb testing.TB, dir string) map[string]string {
	tb.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			t, err := os.Readlink(p)
			out[rel] = "-> " + t
			return err
		case d.IsDir():
			out[rel+"/"] = ""
		default:
			b, err := os.ReadFile(p)
			out[rel] = string(b)
			return err
		}
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	return out
}

func write(tb testing.TB, path, content string) {
	tb.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		tb.Fatal(err)
	}
}

// strays lists .rollback-* entries in the session directory.
func strays(tb testing.TB, current string) []string {
	tb.Helper()
	m, err := filepath.Glob(filepath.Join(filepath.Dir(current), ".rollback-*"))
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

// openNoWait opens the store without waiting for the state lock: for tests that expect it held.
func openNoWait(root, state string) (*Store, error) {
	return OpenOptions(root, state, Options{LockWait: -1})
}
