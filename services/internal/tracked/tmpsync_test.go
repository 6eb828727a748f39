package tracked

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

func TestSyncTmpSkipsSpecialFiles(t *testing.T) {
	tmp, cur := t.TempDir(), t.TempDir()
	must(t, os.WriteFile(filepath.Join(tmp, "f"), []byte("data"), 0o640))
	must(t, unix.Mkfifo(filepath.Join(tmp, "fifo"), 0o600))
	must(t, os.Symlink("../../etc/passwd", filepath.Join(tmp, "up")))
	must(t, os.Symlink("f", filepath.Join(tmp, "same")))
	owner := [2]int{os.Getuid(), os.Getgid()}
	if owner[0] == 0 {
		owner = [2]int{DefaultRunID, DefaultRunID + 1} // root can hand files over: check that it does
	}
	must(t, os.Mkdir(filepath.Join(tmp, "d"), 0o755))
	must(t, syncTmp(tmp, cur, owner))
	dst := filepath.Join(cur, TmpSyncDir)
	for _, name := range []string{".", "f", "same", "d"} {
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(dst, name), &st); err != nil || [2]int{int(st.Uid), int(st.Gid)} != owner {
			t.Errorf("%s owned by %d:%d (%v); want the run's %d:%d", name, st.Uid, st.Gid, err, owner[0], owner[1])
		}
	}
	if b, err := os.ReadFile(filepath.Join(dst, "f")); err != nil || string(b) != "data" {
		t.Errorf("f = %q, %v", b, err)
	}
	if fi, err := os.Stat(filepath.Join(dst, "f")); err != nil || fi.Mode().Perm() != 0o640 {
		t.Errorf("f mode = %v, %v; want 0640", fi.Mode(), err)
	}
	for _, name := range []string{"fifo", "up"} {
		if _, err := os.Lstat(filepath.Join(dst, name)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s synced: %v", name, err)
		}
	}
	// A second sync overwrites and never writes through a planted symlink.
	outside := filepath.Join(t.TempDir(), "victim")
	must(t, os.WriteFile(outside, []byte("keep"), 0o644))
	must(t, os.Remove(filepath.Join(dst, "f")))
	must(t, os.Symlink(outside, filepath.Join(dst, "f")))
	must(t, syncTmp(tmp, cur, owner))
	if b, _ := os.ReadFile(outside); string(b) != "keep" {
		t.Errorf("sync wrote through a symlink: victim = %q", b)
	}
}

func TestSyncTmpRefusesEscapingDestination(t *testing.T) {
	tmp, cur, outside := t.TempDir(), t.TempDir(), t.TempDir()
	must(t, os.WriteFile(filepath.Join(tmp, "f"), []byte("data"), 0o644))
	must(t, os.Symlink(outside, filepath.Join(cur, TmpSyncDir)))
	if err := syncTmp(tmp, cur, [2]int{os.Getuid(), os.Getgid()}); err == nil {
		t.Error("syncTmp through an escaping .allox-tmp symlink succeeded")
	}
	if _, err := os.Stat(filepath.Join(outside, "f")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("file written outside current/: %v", err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
