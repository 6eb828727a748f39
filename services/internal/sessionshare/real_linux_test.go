package sessionshare

// Tests on the real workspace service: a real Btrfs store, real cgroup v2 runs under bubblewrap,
// fences and the policy, built as the daemon builds it. They need root and bwrap.

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/allox-os/allox/internal/btrfstest"
	"github.com/allox-os/allox/internal/rpc"
	"github.com/allox-os/allox/internal/testenv"
	"github.com/allox-os/allox/services/internal/fence"
	"github.com/allox-os/allox/services/internal/plugin"
	"github.com/allox-os/allox/services/internal/sessionshare/shareproto"
	"github.com/allox-os/allox/services/internal/store"
	"github.com/allox-os/allox/services/internal/tracked"
	"github.com/allox-os/allox/services/internal/workspace"
)

// realService is the workspace service over a real Btrfs store and real runs, with agents
// agent-a (session-1) and agent-b (session-1, session-2), each session with checkpoint c1.
func realService(tb testing.TB) *workspace.Service {
	tb.Helper()
	testenv.Root(tb, "for Btrfs and cgroups", "./services/internal/sessionshare")
	testenv.Tool(tb, "bwrap", "apt-get install bubblewrap")
	root := btrfstest.Mount(tb)
	state := filepath.Join(filepath.Dir(root), "state")
	st, err := store.OpenWith(root, state, store.DeleteInBackground)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { st.Close() })
	var b [4]byte
	_, _ = rand.Read(b[:])
	runs, err := tracked.NewManager(tracked.Config{CgroupParent: "allox-share-test-" + hex.EncodeToString(b[:]),
		RecordsDir: filepath.Join(state, "runs")})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		_ = runs.PruneCgroups(func(string, string) bool { return false })
		_ = os.Remove(runs.ParentDir())
	})
	fences, err := fence.Open(state)
	if err != nil {
		tb.Fatal(err)
	}
	policy, err := workspace.OpenPolicy(state)
	if err != nil {
		tb.Fatal(err)
	}
	s := workspace.New(workspace.Deps{Store: st, Runs: runs, Fences: fences, Policy: policy})
	for _, as := range [][2]string{{"agent-a", "session-1"}, {"agent-b", "session-1"}, {"agent-b", "session-2"}} {
		if _, err := s.GetAgent(as[0]); err != nil {
			if _, err := s.CreateAgent(as[0], nil); err != nil {
				tb.Fatal(err)
			}
		}
		if _, err := s.CreateSession(as[0], as[1], nil); err != nil {
			tb.Fatal(err)
		}
		cur, _, _, err := s.SessionPaths(as[0], as[1])
		if err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(cur, "report.txt"), []byte("report of "+as[0]+"/"+as[1]+"\n"), 0o644); err != nil {
			tb.Fatal(err)
		}
		if _, err := s.CreateCheckpoint(as[0], as[1], "c1", store.CheckpointOptions{}); err != nil {
			tb.Fatal(err)
		}
	}
	return s
}

// TestRealShare: on the real service, the seed's read; a write is refused while the target has
// a live run (a real sandboxed run) and allowed after it, owned by the runs' identity and
// readable by the target's next run; the share state survives the rollback of the session.
func TestRealShare(t *testing.T) {
	s := realService(t)
	p := openPlugin(t, s, t.TempDir(), Config{})
	const a, b = "agent-a/session-1", "agent-b/session-1"
	enable(t, p, a, nil)
	enable(t, p, b, map[string]any{"permission": "write"})
	got, err := read(p, a, b, "report.txt")
	if err != nil || string(got) != "report of agent-b/session-1\n" {
		t.Fatalf("the seed's read: %q %v", got, err)
	}

	run, err := s.StartProcess(context.Background(), tracked.StartRequest{AgentID: "agent-b", SessionID: "session-1", Argv: []string{"sleep", "30"}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = write(p, a, b, "from-a.txt", []byte("hello"))
	refused(t, "write while a real run is live", err, rpc.CodeConflict, "target busy", "1 live run")
	if got, err := read(p, a, b, "report.txt"); err != nil || len(got) == 0 {
		t.Fatalf("a read while the target has a live run is allowed: %v", err)
	}
	if err := s.KillRun(run.RunID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.WaitRun(context.Background(), run.RunID); err != nil {
		t.Fatal(err)
	}
	if r, err := write(p, a, b, "from-a.txt", []byte("hello")); err != nil || !r.OK {
		t.Fatalf("write after the run ended: %+v %v", r, err)
	}
	run, err = s.StartProcess(context.Background(), tracked.StartRequest{AgentID: "agent-b", SessionID: "session-1",
		Argv: []string{"sh", "-c", "cat from-a.txt && echo more >> from-a.txt && stat -c %u:%g from-a.txt"}})
	if err != nil {
		t.Fatal(err)
	}
	st, err := s.WaitRun(context.Background(), run.RunID)
	if err != nil {
		t.Fatal(err)
	}
	out, _, _, _ := s.RunOutput(run.RunID, "stdout", 0, 1<<16)
	uid, gid := s.RunIdentity()
	if want := "hello" + itoa(uid) + ":" + itoa(gid) + "\n"; st.ExitCode != 0 || string(out) != want {
		t.Fatalf("the target's run on the written file: exit %d (%s), stdout %q, want %q (the runs own it and can append)", st.ExitCode, st.Reason, out, want)
	}

	if _, err := s.Rollback(context.Background(), "agent-b", "session-1", "c1", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := read(p, a, b, "from-a.txt"); !errors.Is(err, rpc.CodeNotFound) {
		t.Fatalf("read of a file the rollback removed: %v, want not_found", err)
	}
	if got, err := read(p, a, b, "report.txt"); err != nil || string(got) != "report of agent-b/session-1\n" {
		t.Fatalf("the share state after the target's rollback: %q %v", got, err)
	}
}

func itoa(n uint32) string { return jsonString(n) }

func jsonString(v any) string { b, _ := json.Marshal(v); return string(b) }

// bigFile writes size bytes of a pattern into path.
func bigFile(tb testing.TB, path string, size int64) {
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	for n := int64(0); n < size; n += int64(len(buf)) {
		if _, err := f.Write(buf); err != nil {
			tb.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		tb.Fatal(err)
	}
}

// TestRealRollbackVersusRead: a rollback of the target waits for a large read in progress (and
// the read gets every byte of the file as it was); a read while a rollback is in progress is
// refused (target busy). The large (256 MiB) read streams with the daemon's allocations bounded.
func TestRealRollbackVersusRead(t *testing.T) {
	s := realService(t)
	p := openPlugin(t, s, t.TempDir(), Config{})
	const a, b = "agent-a/session-1", "agent-b/session-1"
	enable(t, p, a, nil)
	enable(t, p, b, nil)
	cur, _, _, _ := s.SessionPaths("agent-b", "session-1")
	const size = 256 << 20
	bigFile(t, filepath.Join(cur, "big"), size)

	// A read in progress, then the rollback: it waits for the read's end.
	res, err := call(p, a, shareproto.ActionRead, map[string]any{"target": b, "path": "big"})
	if err != nil {
		t.Fatal(err)
	}
	srv, cli := pair(t)
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	go res.(plugin.Relay)(srv)
	br := bufio.NewReaderSize(cli, 64<<10)
	if _, err := br.ReadBytes('\n'); err != nil {
		t.Fatal(err)
	}
	if _, err := io.CopyN(io.Discard, br, 1<<20); err != nil { // the stream is under way
		t.Fatal(err)
	}
	rolled := make(chan error, 1)
	go func() { _, err := s.Rollback(context.Background(), "agent-b", "session-1", "c1", nil); rolled <- err }()
	select {
	case err := <-rolled:
		t.Fatalf("the rollback returned (%v) while a share read of the target was streaming; it must wait", err)
	case <-time.After(500 * time.Millisecond):
	}
	// While the rollback waits it is in progress: a new share access is refused.
	_, err = read(p, a, b, "report.txt")
	refused(t, "read during the rollback", err, rpc.CodeConflict, b, "target busy")
	n, err := io.CopyN(io.Discard, br, size-(1<<20))
	if err != nil {
		t.Fatalf("the read in progress was cut after %d bytes: %v", n+(1<<20), err)
	}
	line, err := br.ReadBytes('\n')
	if err != nil || string(line) != `{"ok":true,"bytes":268435456}`+"\n" {
		t.Fatalf("trailer %q %v", line, err)
	}
	runtime.ReadMemStats(&after)
	cli.Close()
	select {
	case err := <-rolled:
		if err != nil {
			t.Fatalf("the rollback after the read: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the rollback still waits 30 s after the read ended")
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 16<<20 {
		t.Errorf("streaming %d MiB allocated %d MiB: the read must stream, not buffer", size>>20, alloc>>20)
	} else {
		t.Logf("streamed %d MiB with %d KiB allocated (heap in use %d → %d KiB)", size>>20, alloc>>10, before.HeapInuse>>10, after.HeapInuse>>10)
	}
	if _, err := os.Stat(filepath.Join(cur, "big")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the rollback did not happen after the read: %v", err)
	}
	// Rolled back, the target is readable again.
	if _, err := read(p, a, b, "report.txt"); err != nil {
		t.Fatalf("read after the rollback: %v", err)
	}
}
