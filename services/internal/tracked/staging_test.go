package tracked

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/allox-os/allox/internal/btrfstest"
	"golang.org/x/sys/unix"
)

func blocks(t *testing.T, p string) (size, allocated int64) {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st.Size, st.Blocks * 512
}

// TestSparseTmpStaysSparseOnBtrfs: a run writes a 1 GiB sparse file to its private /tmp; the
// staging lives beside current/ on the session's Btrfs, not in the state, and the file synced
// into current/.allox-tmp keeps its holes (st_blocks), data intact.
func TestSparseTmpStaysSparseOnBtrfs(t *testing.T) {
	e := newEnv(t, nil)
	mnt := btrfstest.Mount(t)
	ws := filepath.Join(mnt, "agents", "a", "workspace")
	e.ws = Workspace{Current: filepath.Join(ws, "sessions", "s1", "current"), Shared: filepath.Join(ws, "shared"), AgentDir: ws,
		RunTmp: filepath.Join(ws, "sessions", "s1", ".run-tmp")}
	for _, d := range []string{e.ws.Current, e.ws.Shared} {
		must(t, os.MkdirAll(d, 0o755))
	}
	must(t, os.Chmod(filepath.Join(mnt, "agents"), 0o711)) // as the store makes it
	st := e.run(t, e.req("s1", "/bin/sh", "-c", `truncate -s 1G /tmp/sparse && printf end >> /tmp/sparse && stat -c %b /tmp/sparse`))
	if st.State != StateExited || st.ExitCode != 0 {
		t.Fatalf("status = %+v, stderr %q", st, e.output(t, st.RunID, "stderr"))
	}
	if filepath.Dir(st.Tmp) != e.ws.RunTmp {
		t.Errorf("staging %s, want it in the session's %s", st.Tmp, e.ws.RunTmp)
	}
	for _, d := range []string{e.state, e.records} {
		if rel, err := filepath.Rel(d, st.Tmp); err == nil && filepath.IsLocal(rel) {
			t.Errorf("staging %s is under the daemon's %s", st.Tmp, d)
		}
	}
	synced := filepath.Join(e.ws.Current, TmpSyncDir, "sparse")
	size, alloc := blocks(t, synced)
	if size != 1<<30+3 {
		t.Fatalf("synced size %d, want %d", size, 1<<30+3)
	}
	if alloc > 1<<20 {
		t.Errorf("synced sparse file allocates %d bytes: the sync filled its holes", alloc)
	}
	f, err := os.Open(synced)
	must(t, err)
	defer f.Close()
	tail := make([]byte, 3)
	if _, err := f.ReadAt(tail, 1<<30); err != nil || string(tail) != "end" {
		t.Errorf("tail = %q, %v", tail, err)
	}
	if _, err := os.Stat(st.Tmp); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("staging left after the run: %v", err)
	}
	var sst unix.Stat_t
	must(t, unix.Stat(e.ws.RunTmp, &sst))
	if sst.Mode&0o7777 != 0o711 || sst.Uid != 0 {
		t.Errorf("staging root mode %#o uid %d, want 0711 root's", sst.Mode&0o7777, sst.Uid)
	}
}

// TestSparseCopyWithoutReflink: across filesystems (no FICLONE) only the data segments are copied.
func TestSparseCopyWithoutReflink(t *testing.T) {
	tmp, cur := t.TempDir(), t.TempDir()
	f, err := os.Create(filepath.Join(tmp, "sparse"))
	must(t, err)
	must(t, f.Truncate(1<<30))
	_, err = f.WriteAt([]byte("middle"), 512<<20)
	must(t, err)
	must(t, f.Close())
	must(t, syncTmp(tmp, cur, [2]int{os.Getuid(), os.Getgid()}))
	size, alloc := blocks(t, filepath.Join(cur, TmpSyncDir, "sparse"))
	if size != 1<<30 || alloc > 1<<20 {
		t.Errorf("copy: size %d, %d bytes allocated; want 1 GiB in a few blocks", size, alloc)
	}
	b := make([]byte, 6)
	g, err := os.Open(filepath.Join(cur, TmpSyncDir, "sparse"))
	must(t, err)
	defer g.Close()
	if _, err := g.ReadAt(b, 512<<20); err != nil || string(b) != "middle" {
		t.Errorf("data at 512 MiB = %q, %v", b, err)
	}
}

// TestRestartRemovesLeftoverRunDirs: a daemon killed between making a run's directory and
// writing its record, or in the middle of a record write, leaves them; the next manager removes
// them and keeps real records.
func TestRestartRemovesLeftoverRunDirs(t *testing.T) {
	e := newEnv(t, nil)
	st := e.run(t, e.req("s1", "/bin/true"))
	orphan := filepath.Join(e.records, e.m.ids.next())
	must(t, os.MkdirAll(orphan, 0o700))
	must(t, os.WriteFile(filepath.Join(orphan, "stdout"), []byte("x"), 0o600))
	temp := filepath.Join(e.records, st.RunID, "."+statusFile+".tmp-1")
	must(t, os.WriteFile(temp, []byte("{"), 0o600))
	m, err := NewManager(e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{orphan, temp} {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left: %v", p, err)
		}
	}
	if _, err := m.Get(st.RunID); err != nil {
		t.Errorf("real record lost: %v", err)
	}
}

// TestDeletedSessionsLoseTheirCgroups: ForgetSession, ForgetAgent and PruneCgroups remove the
// groups that deleted sessions and agents left under the runs' parent, and nothing else.
func TestDeletedSessionsLoseTheirCgroups(t *testing.T) {
	e := newEnv(t, nil)
	for _, s := range []string{"s1", "s2"} {
		if st := e.run(t, e.req(s, "/bin/true")); st.State != StateExited {
			t.Fatalf("run: %+v", st)
		}
	}
	s1, s2 := e.m.CgroupDir("a", "s1", ""), e.m.CgroupDir("a", "s2", "")
	for _, d := range []string{s1, s2} {
		if _, err := os.Stat(d); err != nil {
			t.Fatalf("session group %s: %v", d, err)
		}
	}
	must(t, e.m.ForgetSession("a", "s1"))
	if _, err := os.Stat(s1); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("deleted session's group left: %v", err)
	}
	must(t, os.MkdirAll(e.m.CgroupDir("gone", "s9", ""), 0o755)) // a deleted agent's, from before
	must(t, e.m.PruneCgroups(func(agent, session string) bool { return agent == "a" }))
	if _, err := os.Stat(filepath.Join(e.m.ParentDir(), "gone")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("deleted agent's group left: %v", err)
	}
	if _, err := os.Stat(s2); err != nil {
		t.Errorf("kept session's group removed: %v", err)
	}
	must(t, e.m.ForgetAgent("a"))
	if _, err := os.Stat(filepath.Dir(s2)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("deleted agent's group left: %v", err)
	}
	if _, err := os.Stat(e.m.ParentDir()); err != nil {
		t.Errorf("the runs' parent group went too: %v", err)
	}
}
