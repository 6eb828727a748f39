package store

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/allox-os/allox/internal/btrfstest"
	"golang.org/x/sys/unix"
)

// statAt lstats path.
func statAt(t *testing.T, path string) unix.Stat_t {
	t.Helper()
	var st unix.Stat_t
	mustDo(t, "stat "+path, unix.Lstat(path, &st))
	return st
}

// A run's private /tmp (staged in the session's .run-tmp) counts against the session's quota: a
// write beyond it gets EDQUOT, and another session still writes and checkpoints. The quota set
// at create is audited, and the session's deletion removes .run-tmp.
func TestQuotaRunTmpCounted(t *testing.T) {
	s, _, state := quotaStore(t, QuotaConfig{Session: 256 * mib})
	_, err := s.CreateAgent("a")
	mustDo(t, "agent", err)
	_, err = s.CreateSessionWith("a", "full", SessionOptions{Quota: 32 * mib})
	mustDo(t, "session full", err)
	other, err := s.CreateSession("a", "other")
	mustDo(t, "session other", err)
	p, err := s.RunPaths("a", "full")
	mustDo(t, "run paths", err)
	if st := statAt(t, p.RunTmp); st.Ino != firstFreeObjID || st.Mode&0o7777 != 0o711 || st.Uid != 0 {
		t.Fatalf("%s: inode %d mode %#o uid %d, want a subvolume root (inode 256), 0711, root's", p.RunTmp, st.Ino, st.Mode&0o7777, st.Uid)
	}
	run := filepath.Join(p.RunTmp, "r1")
	mustDo(t, "run dir", os.Mkdir(run, 0o700))
	out, err := fill(filepath.Join(run, "fill"), 64)
	if err == nil || !strings.Contains(out, "Disk quota exceeded") {
		t.Fatalf("dd of 64 MiB into the /tmp of a 32 MiB session: %v, want EDQUOT\n%s", err, out)
	}
	if q := usage(t, s, "a", "full"); q.Used < 24*mib {
		t.Errorf("full session's quota = %+v, want the /tmp's writes charged to it", q)
	}
	if out, err := fill(filepath.Join(other.Current, "data"), 16); err != nil {
		t.Fatalf("the other session's write failed: %v\n%s", err, out)
	}
	_, err = s.CreateCheckpoint("a", "other", "c1", CheckpointOptions{})
	mustDo(t, "the other session's checkpoint", err)
	_, err = s.CreateCheckpoint("a", "full", "c1", CheckpointOptions{})
	mustDo(t, "the full session's checkpoint", err)

	b, err := os.ReadFile(filepath.Join(state, "audit.jsonl"))
	mustDo(t, "audit log", err)
	if !strings.Contains(string(b), `"store.session.create"`) || !strings.Contains(string(b), "limit 33554432") {
		t.Errorf("audit log has no session.create with its quota (limit 33554432):\n%s", b)
	}
	mustDo(t, "delete", s.DeleteSession("a", "full"))
	if _, err := os.Lstat(p.RunTmp); !os.IsNotExist(err) {
		t.Errorf("%s after session.delete: %v, want gone", p.RunTmp, err)
	}
}

// The agent's shared/ counts against the agent's quota: a write beyond it gets EDQUOT while
// another agent keeps writing. The store's quota reports its reserve.
func TestQuotaSharedCounted(t *testing.T) {
	s, _, _ := quotaStore(t, QuotaConfig{Agent: 32 * mib, Reserve: 64 * mib})
	a, err := s.CreateAgent("a")
	mustDo(t, "agent a", err)
	_, err = s.CreateAgent("b")
	mustDo(t, "agent b", err)
	sb, err := s.CreateSession("b", "s")
	mustDo(t, "session b", err)
	if st := statAt(t, a.Shared); st.Ino != firstFreeObjID || st.Mode&0o7777 != 0o755 {
		t.Fatalf("%s: inode %d mode %#o, want a subvolume root, 0755", a.Shared, st.Ino, st.Mode&0o7777)
	}
	out, err := fill(filepath.Join(a.Shared, "fill"), 64)
	if err == nil || !strings.Contains(out, "Disk quota exceeded") {
		t.Fatalf("dd of 64 MiB into shared/ of a 32 MiB agent: %v, want EDQUOT\n%s", err, out)
	}
	mustDo(t, "sync", unix.Syncfs(s.fd()))
	q, ok, err := s.AgentQuota("a")
	if err != nil || !ok || q.Used < 24*mib || len(q.Unlimited) != 0 {
		t.Errorf("agent quota = %+v %v %v, want shared/'s writes charged, nothing unlimited", q, ok, err)
	}
	if out, err := fill(filepath.Join(sb.Current, "data"), 16); err != nil {
		t.Fatalf("the other agent's write failed: %v\n%s", err, out)
	}
	sq, ok, err := s.StoreQuota()
	if err != nil || !ok || sq.Reserve != 64*mib || sq.Limit == 0 || sq.Qgroup != "3/1" {
		t.Errorf("store quota = %+v %v %v, want 3/1 with a limit and reserve 64 MiB", sq, ok, err)
	}
	mustDo(t, "delete agent a", s.DeleteAgent("a"))
}

// A store made before .run-tmp and shared/ were subvolumes: an empty shared/ and an empty
// .run-tmp become subvolumes in their qgroups; a non-empty shared/ is left and reported unlimited.
func TestQuotaOldDirsMigrated(t *testing.T) {
	root := btrfstest.Mount(t)
	state := filepath.Join(root, ".allox-state")
	s, err := Open(root, state) // quotas off
	mustDo(t, "open", err)
	for _, id := range []string{"a", "b"} {
		_, err := s.CreateAgent(id)
		mustDo(t, "agent "+id, err)
	}
	_, err = s.CreateSession("a", "s")
	mustDo(t, "session", err)
	plain := func(dir, name string, mode uint32) {
		d, err := openDir(s.fd(), dir)
		mustDo(t, "open "+dir, err)
		defer d.Close()
		mustDo(t, "delete "+name, subvolDelete(int(d.Fd()), name))
		mustDo(t, "mkdir "+name, unix.Mkdirat(int(d.Fd()), name, mode))
		mustDo(t, "chmod "+name, unix.Fchmodat(int(d.Fd()), name, mode, 0))
	}
	plain(workspaceRel("a"), "shared", 0o755)
	plain(workspaceRel("b"), "shared", 0o755)
	plain(sessionRel("a", "s"), RunTmpDir, 0o711)
	write(t, filepath.Join(root, workspaceRel("b"), "shared", "old"), "kept")
	mustDo(t, "close", s.Close())

	s = reopenQuota(t, root, state, QuotaConfig{Agent: 64 * mib})
	if st := statAt(t, filepath.Join(root, workspaceRel("a"), "shared")); st.Ino != firstFreeObjID {
		t.Errorf("agent a's empty shared/ was not made a subvolume")
	}
	if q, _, _ := s.AgentQuota("a"); len(q.Unlimited) != 0 {
		t.Errorf("agent a's quota = %+v, want nothing unlimited", q)
	}
	if q, _, _ := s.AgentQuota("b"); len(q.Unlimited) != 1 || q.Unlimited[0] != "shared/" {
		t.Errorf("agent b's quota = %+v, want its non-empty shared/ unlimited", q)
	}
	if b, err := os.ReadFile(filepath.Join(root, workspaceRel("b"), "shared", "old")); err != nil || string(b) != "kept" {
		t.Errorf("agent b's shared/old = %q %v, want it kept", b, err)
	}
	p, err := s.RunPaths("a", "s")
	mustDo(t, "run paths", err)
	if st := statAt(t, p.RunTmp); st.Ino != firstFreeObjID || st.Mode&0o7777 != 0o711 {
		t.Errorf("%s: inode %d mode %#o, want a subvolume, 0711", p.RunTmp, st.Ino, st.Mode&0o7777)
	}
	a, err := s.GetAgent("a")
	mustDo(t, "get agent", err)
	if out, err := fill(filepath.Join(a.Shared, "fill"), 96); err == nil || !strings.Contains(out, "Disk quota exceeded") {
		t.Errorf("dd of 96 MiB into the migrated shared/ of a 64 MiB agent: %v, want EDQUOT\n%s", err, out)
	}
}
