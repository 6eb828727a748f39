package store

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/allox-os/allox/internal/btrfstest"
	"golang.org/x/sys/unix"
)

const mib = 1 << 20

// ioc is the kernel's _IOC(dir, type, nr, size).
func ioc(dir, typ, nr, size uintptr) uintptr { return dir<<30 | size<<16 | typ<<8 | nr }

func TestQuotaUAPILayouts(t *testing.T) {
	const w, r, rw = 1, 2, 3 // _IOC_WRITE, _IOC_READ
	for _, c := range []struct {
		name      string
		got, want uintptr
	}{
		{"sizeof(btrfs_ioctl_quota_ctl_args)", unsafe.Sizeof(quotaCtlArgs{}), 16},
		{"sizeof(btrfs_ioctl_qgroup_assign_args)", unsafe.Sizeof(qgroupAssignArgs{}), 24},
		{"sizeof(btrfs_ioctl_qgroup_create_args)", unsafe.Sizeof(qgroupCreateArgs{}), 16},
		{"sizeof(btrfs_qgroup_limit)", unsafe.Sizeof(qgroupLimit{}), 40},
		{"sizeof(btrfs_ioctl_qgroup_limit_args)", unsafe.Sizeof(qgroupLimitArgs{}), 48},
		{"sizeof(btrfs_ioctl_search_key)", unsafe.Sizeof(searchKey{}), 104},
		{"sizeof(btrfs_ioctl_search_header)", unsafe.Sizeof(searchHeader{}), 32},
		{"sizeof(btrfs_ioctl_search_args)", unsafe.Sizeof(searchArgs{}), 4096},
		{"BTRFS_IOC_SYNC", iocSync, ioc(0, 0x94, 8, 0)},
		{"BTRFS_IOC_TREE_SEARCH", iocTreeSearch, ioc(rw, 0x94, 17, 4096)},
		{"BTRFS_IOC_QUOTA_CTL", iocQuotaCtl, ioc(rw, 0x94, 40, 16)},
		{"BTRFS_IOC_QGROUP_ASSIGN", iocQgroupAssign, ioc(w, 0x94, 41, 24)},
		{"BTRFS_IOC_QGROUP_CREATE", iocQgroupCreate, ioc(w, 0x94, 42, 16)},
		{"BTRFS_IOC_QGROUP_LIMIT", iocQgroupLimit, ioc(r, 0x94, 43, 48)},
		{"BTRFS_QUOTA_CTL_ENABLE_SIMPLE_QUOTA", quotaCtlEnableSimple, 4},
		{"BTRFS_QGROUP_STATUS_FLAG_SIMPLE_MODE", statusFlagSimple, 8},
		{"BTRFS_QGROUP_INFO_KEY", qgroupInfoKey, 242},
		{"BTRFS_QGROUP_LIMIT_KEY", qgroupLimitKey, 244},
		{"BTRFS_QGROUP_RELATION_KEY", qgroupRelationKey, 246},
	} {
		if c.got != c.want {
			t.Errorf("%s = %#x, want %#x", c.name, c.got, c.want)
		}
	}
	if q := mkQgroup(2, 7); q.String() != "2/7" || q.level() != 2 || uint64(q) != 2<<48|7 {
		t.Errorf("qgroup 2/7 = %#x %s", uint64(q), q)
	}
}

// quotaStore opens a store at the root of its own Btrfs filesystem with the state where the daemon
// keeps it by default (ROOT/.allox-state) and quotas on.
func quotaStore(t *testing.T, cfg QuotaConfig) (s *Store, root, state string) {
	t.Helper()
	root = btrfstest.Mount(t)
	state = filepath.Join(root, ".allox-state")
	return reopenQuota(t, root, state, cfg), root, state
}

func reopenQuota(t *testing.T, root, state string, cfg QuotaConfig) *Store {
	t.Helper()
	s, err := Open(root, state)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.EnableQuota(cfg); err != nil {
		t.Fatal(err)
	}
	return s
}

// fill writes up to n MiB to path with dd and returns dd's error and output.
func fill(path string, n int) (string, error) {
	out, err := exec.Command("dd", "if=/dev/zero", "of="+path, "bs=1M", "count="+strconv.Itoa(n), "conv=fsync").CombinedOutput()
	return string(out), err
}

func usage(t *testing.T, s *Store, agentID, sessionID string) Quota {
	t.Helper()
	if err := unix.Syncfs(s.fd()); err != nil {
		t.Fatal(err)
	}
	q, ok, err := s.SessionQuota(agentID, sessionID)
	if err != nil || !ok {
		t.Fatalf("session quota %s/%s: %v %v", agentID, sessionID, ok, err)
	}
	return q
}

func mustDo(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// A session at its limit gets EDQUOT; another session of the same agent checkpoints, rolls back
// and writes as before, and the full session itself can still checkpoint and roll back.
func TestQuotaSessionAtLimit(t *testing.T) {
	s, _, _ := quotaStore(t, QuotaConfig{Session: 256 * mib})
	_, err := s.CreateAgent("a")
	mustDo(t, "agent", err)
	full, err := s.CreateSessionWith("a", "full", SessionOptions{Quota: 32 * mib})
	mustDo(t, "session full", err)
	other, err := s.CreateSession("a", "other")
	mustDo(t, "session other", err)
	_, err = s.CreateCheckpoint("a", "full", "empty", CheckpointOptions{})
	mustDo(t, "checkpoint", err)

	out, err := fill(filepath.Join(full.Current, "fill"), 64)
	if err == nil || !strings.Contains(out, "Disk quota exceeded") {
		t.Fatalf("dd of 64 MiB into a 32 MiB session: %v\n%s", err, out)
	}
	if q := usage(t, s, "a", "full"); q.Limit != 32*mib || q.Used < 24*mib || q.Used > 33*mib {
		t.Errorf("full session's quota = %+v, want limit 32 MiB, used near it", q)
	}

	if out, err := fill(filepath.Join(other.Current, "data"), 16); err != nil {
		t.Fatalf("the other session's write failed: %v\n%s", err, out)
	}
	_, err = s.CreateCheckpoint("a", "other", "c1", CheckpointOptions{})
	mustDo(t, "the other session's checkpoint", err)
	write(t, filepath.Join(other.Current, "later"), "x")
	_, err = s.Rollback(context.Background(), "a", "other", "c1")
	mustDo(t, "the other session's rollback", err)
	if _, err := os.Stat(filepath.Join(other.Current, "later")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("rollback of the other session did not restore it: %v", err)
	}

	_, err = s.CreateCheckpoint("a", "full", "at-limit", CheckpointOptions{})
	mustDo(t, "checkpoint of the full session", err)
	_, err = s.Rollback(context.Background(), "a", "full", "empty")
	mustDo(t, "rollback of the full session", err)
	mustDo(t, "delete at-limit", s.DeleteCheckpoint("a", "full", "at-limit"))
	waitCleaner(t, s)
	if q := usage(t, s, "a", "full"); q.Used > mib {
		t.Errorf("after rolling back to the empty checkpoint and deleting the full one, used = %d, want < 1 MiB", q.Used)
	}
	if out, err := fill(filepath.Join(full.Current, "again"), 16); err != nil {
		t.Errorf("the full session cannot write after its space was freed: %v\n%s", err, out)
	}
}

// waitCleaner waits until Btrfs has reclaimed every deleted subvolume.
func waitCleaner(t *testing.T, s *Store) {
	t.Helper()
	mustDo(t, "sync", fsSync(s.fd())) // wakes the cleaner (else it waits for the next commit: up to 30 s)
	if out, err := exec.Command("btrfs", "subvolume", "sync", s.root).CombinedOutput(); err != nil {
		t.Fatalf("btrfs subvolume sync: %v: %s", err, out)
	}
}

// With every agent's write refused (the all-agents qgroup at its limit), the daemon's state still
// takes writes, and checkpoint.delete, session.rollback, session.delete, agent.delete and a
// restart all work and give the space back.
func TestQuotaStoreFull(t *testing.T) {
	s, root, state := quotaStore(t, QuotaConfig{Reserve: 256 * mib})
	for _, a := range []string{"a", "b"} {
		_, err := s.CreateAgent(a)
		mustDo(t, "agent "+a, err)
	}
	s1, err := s.CreateSession("a", "s1")
	mustDo(t, "s1", err)
	s2, err := s.CreateSession("a", "s2")
	mustDo(t, "s2", err)
	_, err = s.CreateSession("b", "sb")
	mustDo(t, "sb", err)
	_, err = s.CreateCheckpoint("a", "s1", "before", CheckpointOptions{})
	mustDo(t, "checkpoint before", err)

	out, err := fill(filepath.Join(s1.Current, "fill"), 2048)
	if err == nil || !strings.Contains(out, "Disk quota exceeded") {
		t.Fatalf("filling the store from one session: %v, want EDQUOT (the all-agents limit) before ENOSPC\n%s", err, out)
	}
	if out, err := fill(filepath.Join(s2.Current, "more"), 8); err == nil {
		t.Fatalf("another session wrote 8 MiB into a full store:\n%s", out)
	}
	// The reserve is the state's: 64 MiB of state writes succeed.
	mustDo(t, "state write", os.WriteFile(filepath.Join(state, "big"), make([]byte, 64*mib), 0o600))
	mustDo(t, "state fsync", unix.Syncfs(s.fd()))
	mustDo(t, "state remove", os.Remove(filepath.Join(state, "big")))

	_, err = s.CreateCheckpoint("a", "s1", "full", CheckpointOptions{})
	mustDo(t, "checkpoint of a full store", err)
	mustDo(t, "checkpoint.delete", s.DeleteCheckpoint("a", "s1", "full"))
	_, err = s.Rollback(context.Background(), "a", "s1", "before")
	mustDo(t, "session.rollback", err)
	mustDo(t, "session.delete", s.DeleteSession("a", "s2"))
	mustDo(t, "session.delete sb", s.DeleteSession("b", "sb"))
	mustDo(t, "agent.delete", s.DeleteAgent("b"))

	mustDo(t, "close", s.Close())
	s = reopenQuota(t, root, state, QuotaConfig{Reserve: 256 * mib})
	waitCleaner(t, s)
	if q := usage(t, s, "a", "s1"); q.Used > mib {
		t.Errorf("s1 after rollback to its empty checkpoint: used %d, want < 1 MiB", q.Used)
	}
	mustDo(t, "limit all agents", s.limitAllAgents())
	if out, err := fill(filepath.Join(s1.Current, "again"), 64); err != nil {
		t.Errorf("writing after the space was freed: %v\n%s", err, out)
	}
}

// Limits are the kernel's and the state's, so they survive a restart with other defaults; a store
// opened without EnableQuota (the observer's recover) still puts what it creates into the qgroups.
func TestQuotaLimitsSurviveRestart(t *testing.T) {
	s, root, state := quotaStore(t, QuotaConfig{Session: 512 * mib, Agent: 100 * mib})
	_, err := s.CreateAgent("a")
	mustDo(t, "agent", err)
	sess, err := s.CreateSessionWith("a", "s", SessionOptions{Quota: 40 * mib})
	mustDo(t, "session", err)
	_, err = s.CreateCheckpoint("a", "s", "c", CheckpointOptions{})
	mustDo(t, "checkpoint", err)
	mustDo(t, "close", s.Close())

	s, err = Open(root, state) // no EnableQuota, as the recover binary opens it
	mustDo(t, "open", err)
	_, err = s.Rollback(context.Background(), "a", "s", "c")
	mustDo(t, "rollback", err)
	if out, err := fill(filepath.Join(sess.Current, "fill"), 64); err == nil || !strings.Contains(out, "Disk quota exceeded") {
		t.Errorf("64 MiB into the 40 MiB session after a rollback by a store without EnableQuota: %v\n%s", err, out)
	}
	mustDo(t, "close", s.Close())

	s = reopenQuota(t, root, state, QuotaConfig{Session: 1 << 30})
	if q := usage(t, s, "a", "s"); q.Limit != 40*mib || q.Qgroup[:2] != "1/" {
		t.Errorf("session quota after restart = %+v, want limit 40 MiB", q)
	}
	if q, ok, err := s.AgentQuota("a"); err != nil || !ok || q.Limit != 100*mib || q.Qgroup[:2] != "2/" {
		t.Errorf("agent quota after restart = %+v %v %v, want limit 100 MiB", q, ok, err)
	}
	_, err = s.CreateSession("a", "new")
	mustDo(t, "new session", err)
	if q := usage(t, s, "a", "new"); q.Limit != 1<<30 {
		t.Errorf("a new session's limit = %d, want the new default 1 GiB", q.Limit)
	}
}

// Usage grows with writes, not with checkpoints (a snapshot is charged its root node only), grows
// when data a checkpoint holds is overwritten, and shrinks when that checkpoint is deleted.
func TestQuotaUsageGrowsAndShrinks(t *testing.T) {
	s, _, _ := quotaStore(t, QuotaConfig{})
	_, err := s.CreateAgent("a")
	mustDo(t, "agent", err)
	sess, err := s.CreateSession("a", "s")
	mustDo(t, "session", err)
	f := filepath.Join(sess.Current, "data")
	near := func(what string, got Quota, want int64) {
		t.Helper()
		if got.Used < want || got.Used > want+mib {
			t.Errorf("%s: used %d, want %d (+ up to 1 MiB of metadata)", what, got.Used, want)
		}
	}
	near("empty", usage(t, s, "a", "s"), 0)
	_, err = fill(f, 8)
	mustDo(t, "write", err)
	near("8 MiB written", usage(t, s, "a", "s"), 8*mib)
	_, err = s.CreateCheckpoint("a", "s", "c", CheckpointOptions{})
	mustDo(t, "checkpoint", err)
	near("after a checkpoint", usage(t, s, "a", "s"), 8*mib)
	_, err = fill(f, 8) // dd truncates: new extents, the checkpoint keeps the old ones
	mustDo(t, "overwrite", err)
	near("overwritten under a checkpoint", usage(t, s, "a", "s"), 16*mib)
	if q, _, _ := s.AgentQuota("a"); q.Used < 16*mib {
		t.Errorf("agent usage %d below its session's", q.Used)
	}
	mustDo(t, "delete checkpoint", s.DeleteCheckpoint("a", "s", "c"))
	waitCleaner(t, s)
	near("checkpoint deleted", usage(t, s, "a", "s"), 8*mib)
	mustDo(t, "rm", os.Remove(f))
	near("file removed", usage(t, s, "a", "s"), 0)
}
