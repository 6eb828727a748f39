package sessionshare

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/allox-os/allox/internal/rpc"
	"github.com/allox-os/allox/services/internal/plugin"
	"github.com/allox-os/allox/services/internal/sessionshare/shareproto"
	"github.com/allox-os/allox/services/internal/workspace"
)

// fakeWorkspace is the workspace service's part the plugin uses, over plain directories: the
// share rules and the path checks do not depend on Btrfs (real_linux_test.go runs them on it).
type fakeWorkspace struct {
	root   string
	mu     sync.Mutex
	leases map[key]int
	busy   map[key]bool
	runs   map[key]int
}

func newFake(t *testing.T) *fakeWorkspace {
	return &fakeWorkspace{root: t.TempDir(), leases: map[key]int{}, busy: map[key]bool{}, runs: map[key]int{}}
}

func (w *fakeWorkspace) current(agent, session string) string {
	return filepath.Join(w.root, agent, session, "current")
}

func (w *fakeWorkspace) SessionPaths(agent, session string) (string, string, string, error) {
	c := w.current(agent, session)
	if _, err := os.Stat(c); err != nil {
		return "", "", "", fmt.Errorf("session %s/%s not found", agent, session)
	}
	return c, "", "", nil
}

func (w *fakeWorkspace) Lease(agent, session string) (func(), error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	k := key{agent, session}
	if w.busy[k] {
		return nil, workspace.ErrSessionBusy
	}
	w.leases[k]++
	return func() { w.mu.Lock(); w.leases[k]--; w.mu.Unlock() }, nil
}

func (w *fakeWorkspace) held(k key) int { w.mu.Lock(); defer w.mu.Unlock(); return w.leases[k] }

func (w *fakeWorkspace) ActiveRuns(agent, session string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.runs[key{agent, session}]
}

func (w *fakeWorkspace) RunIdentity() (uint32, uint32) {
	return uint32(os.Getuid()), uint32(os.Getgid())
}

// three sessions of two agents, as the tests' world: agent-a/session-1, agent-b/session-1 and
// agent-b/session-2, each with report.txt and output/result.txt.
func world(t *testing.T, ws *fakeWorkspace) {
	for _, s := range []string{"agent-a/session-1", "agent-b/session-1", "agent-b/session-2"} {
		a, b, _ := strings.Cut(s, "/")
		c := ws.current(a, b)
		must(t, os.MkdirAll(filepath.Join(c, "output"), 0o755))
		must(t, os.WriteFile(filepath.Join(c, "report.txt"), []byte("report of "+s+"\n"), 0o644))
		must(t, os.WriteFile(filepath.Join(c, "output", "result.txt"), []byte("result of "+s+"\n"), 0o644))
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func openPlugin(t *testing.T, ws Workspace, state string, cfg Config) *Plugin {
	t.Helper()
	p, err := Open(cfg, ws, state, nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// call runs action as the router does for a session-socket call of from ("agent/session").
func call(p *Plugin, from, action string, params map[string]any) (any, error) {
	a, s, _ := strings.Cut(from, "/")
	if params == nil {
		params = map[string]any{}
	}
	params["agent_id"], params["session_id"] = a, s
	raw, _ := json.Marshal(params)
	act, ok := p.actions()[action]
	if !ok {
		return nil, fmt.Errorf("no action %s", action)
	}
	return act.Handler(context.Background(), &plugin.Call{Action: action, Params: raw, Origin: plugin.Session,
		Caller: &plugin.SessionRef{AgentID: a, SessionID: s}})
}

// read is the client's side of share.read: header, bytes, ok trailer.
func read(p *Plugin, from, target, path string) ([]byte, error) {
	t := (*testing.T)(nil)
	res, err := call(p, from, shareproto.ActionRead, map[string]any{"target": target, "path": path})
	if err != nil {
		return nil, err
	}
	srv, cli := pair(t)
	done := make(chan error, 1)
	go func() { done <- res.(plugin.Relay)(srv) }()
	defer cli.Close()
	data, err := readStream(cli, nil)
	<-done
	return data, err
}

// readStream reads a share.read stream per shareproto; the bytes go to sink, or are returned
// when sink is nil.
func readStream(conn io.Reader, sink io.Writer) ([]byte, error) {
	br := bufio.NewReaderSize(conn, 64<<10)
	line, err := br.ReadBytes('\n')
	if err != nil {
		return nil, fmt.Errorf("header: %w", err)
	}
	var h shareproto.ReadHeader
	if err := json.Unmarshal(line, &h); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	w := io.Writer(&buf)
	if sink != nil {
		w = sink
	}
	n, err := io.CopyN(w, br, h.Size)
	if err != nil {
		return nil, fmt.Errorf("data: %d of %d bytes: %w", n, h.Size, err)
	}
	line, err = br.ReadBytes('\n')
	if err != nil {
		return nil, fmt.Errorf("trailer: %w", err)
	}
	var r shareproto.Result
	if err := json.Unmarshal(line, &r); err != nil || !r.OK || r.Bytes != h.Size {
		return nil, fmt.Errorf("trailer %s (%v)", line, err)
	}
	return buf.Bytes(), nil
}

// write is the client's side of share.write: params with the size, the bytes, one Result line.
func write(p *Plugin, from, target, path string, data []byte) (shareproto.Result, error) {
	return writeN(p, from, target, path, int64(len(data)), data)
}

func writeN(p *Plugin, from, target, path string, size int64, data []byte) (shareproto.Result, error) {
	t := (*testing.T)(nil)
	res, err := call(p, from, shareproto.ActionWrite, map[string]any{"target": target, "path": path, "size": size})
	if err != nil {
		return shareproto.Result{}, err
	}
	srv, cli := pair(t)
	done := make(chan error, 1)
	go func() { done <- res.(plugin.Relay)(srv) }()
	defer cli.Close()
	go func() {
		cli.Write(data)
		if int64(len(data)) < size {
			cli.CloseWrite()
		}
	}()
	var r shareproto.Result
	line, err := bufio.NewReader(cli).ReadBytes('\n')
	<-done
	if err != nil {
		return r, err
	}
	return r, json.Unmarshal(line, &r)
}

// pair is a connected pair of unix stream sockets, as the session socket's stream is (with
// deadlines and CloseWrite).
func pair(t *testing.T) (*net.UnixConn, *net.UnixConn) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		panic(err)
	}
	conn := func(fd int) *net.UnixConn {
		f := os.NewFile(uintptr(fd), "pair")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			panic(err)
		}
		return c.(*net.UnixConn)
	}
	_ = t
	return conn(fds[0]), conn(fds[1])
}

func enable(t *testing.T, p *Plugin, from string, params map[string]any) {
	t.Helper()
	if _, err := call(p, from, shareproto.ActionEnable, params); err != nil {
		t.Fatalf("%s: share.enable: %v", from, err)
	}
}

// refused checks that err is an rpc error with code whose message names the wanted parts.
func refused(t *testing.T, what string, err error, code rpc.Code, parts ...string) {
	t.Helper()
	var re *rpc.Error
	if !errors.As(err, &re) || re.Code != code {
		t.Fatalf("%s: err = %v, want an rpc error with code %s", what, err, code)
	}
	if strings.Contains(re.Message, "\n") {
		t.Errorf("%s: the error is not one line: %q", what, re.Message)
	}
	for _, s := range parts {
		if !strings.Contains(re.Message, s) {
			t.Errorf("%s: error %q does not name %q", what, re.Message, s)
		}
	}
}

// TestShareRules: the seed's sequence (both enable, then read agent-b/session-1 report.txt), the
// refusals of a session that does not share (both ways), read-only, scope output, disable.
func TestShareRules(t *testing.T) {
	ws := newFake(t)
	world(t, ws)
	p := openPlugin(t, ws, t.TempDir(), Config{})
	const a, b1, b2 = "agent-a/session-1", "agent-b/session-1", "agent-b/session-2"

	_, err := read(p, a, b1, "report.txt")
	refused(t, "read before either enabled", err, rpc.CodeForbidden, "share.read", b1, "report.txt", "not enabled", a)
	enable(t, p, a, nil)
	_, err = read(p, a, b1, "report.txt")
	refused(t, "read of a target that does not share", err, rpc.CodeForbidden, b1, "report.txt", "not enabled: the target")
	_, err = read(p, b1, a, "report.txt")
	refused(t, "read by a session that does not share", err, rpc.CodeForbidden, a, "not enabled: your session "+b1)

	enable(t, p, b1, nil)
	got, err := read(p, a, b1, "report.txt")
	if err != nil || string(got) != "report of agent-b/session-1\n" {
		t.Fatalf("the seed's read: %q, %v", got, err)
	}
	got, err = read(p, b1, a, "output/result.txt")
	if err != nil || string(got) != "result of agent-a/session-1\n" {
		t.Fatalf("the read back: %q, %v", got, err)
	}
	_, err = read(p, b2, b1, "report.txt")
	refused(t, "the third session, not sharing", err, rpc.CodeForbidden, "not enabled")

	// Read-only (the default) refuses writes; write permission allows them.
	_, err = write(p, a, b1, "new.txt", []byte("x"))
	refused(t, "write into a read-only share", err, rpc.CodeForbidden, b1, "new.txt", "read-only")
	if _, err := os.Stat(filepath.Join(ws.current("agent-b", "session-1"), "new.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused write left a file: %v", err)
	}

	// Scope output: the rest of current/ is out of sight.
	enable(t, p, b2, map[string]any{"scope": "output", "permission": "write"})
	got, err = read(p, a, b2, "result.txt")
	if err != nil || string(got) != "result of agent-b/session-2\n" {
		t.Fatalf("read in scope output: %q, %v", got, err)
	}
	_, err = read(p, a, b2, "../report.txt")
	refused(t, "read above scope output", err, rpc.CodeForbidden, "outside the scope")
	_, err = read(p, a, b2, "report.txt")
	refused(t, "current/report.txt through scope output", err, rpc.CodeNotFound, "report.txt")
	ls, err := call(p, a, shareproto.ActionLs, map[string]any{"target": b2})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"result.txt"}, names(ls.(shareproto.Listing))); diff != "" {
		t.Errorf("ls of scope output (-want +got):\n%s", diff)
	}
	if r, err := write(p, a, b2, "from-a.txt", []byte("hello")); err != nil || !r.OK || r.Bytes != 5 {
		t.Fatalf("write into a write share: %+v, %v", r, err)
	}
	if b, _ := os.ReadFile(filepath.Join(ws.current("agent-b", "session-2"), "output", "from-a.txt")); string(b) != "hello" {
		t.Fatalf("the written file holds %q", b)
	}

	st, err := call(p, a, shareproto.ActionStatus, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := shareproto.State{Enabled: true, Scope: "", Permission: "read", MaxRead: DefaultMaxRead, MaxWrite: DefaultMaxWrite,
		Peers: []shareproto.Peer{{Target: b1, Scope: "", Permission: "read"}, {Target: b2, Scope: "output", Permission: "write"}}}
	if diff := cmp.Diff(want, st); diff != "" {
		t.Errorf("share.status (-want +got):\n%s", diff)
	}

	// Disable takes effect for the next request, both ways.
	if _, err := call(p, b1, shareproto.ActionDisable, nil); err != nil {
		t.Fatal(err)
	}
	_, err = read(p, a, b1, "report.txt")
	refused(t, "read after the target disabled", err, rpc.CodeForbidden, "not enabled: the target")
	_, err = read(p, b1, a, "report.txt")
	refused(t, "read by a session that disabled", err, rpc.CodeForbidden, "not enabled: your session")

	for _, tc := range []struct {
		params map[string]any
		field  string
	}{
		{map[string]any{"permission": "all"}, "params.permission"},
		{map[string]any{"scope": "/etc"}, "params.scope"},
		{map[string]any{"scope": "../x"}, "params.scope"},
		{map[string]any{"scope": "missing"}, "params.scope"},
		{map[string]any{"scope": "report.txt"}, "params.scope"},
	} {
		_, err := call(p, b1, shareproto.ActionEnable, tc.params)
		var re *rpc.Error
		if !errors.As(err, &re) || re.Field != tc.field {
			t.Errorf("enable %v: %v, want an error on %s", tc.params, err, tc.field)
		}
	}
	if _, ok := p.get(key{"agent-b", "session-1"}); ok {
		t.Error("a refused enable enabled the session")
	}
}

func names(l shareproto.Listing) []string {
	var out []string
	for _, e := range l.Entries {
		out = append(out, e.Name)
	}
	return out
}

// TestEscapes: "..", absolute paths, a symlink out of the scope, a FIFO (refused without
// blocking), a hard link to a file outside the scope, all refused and audited.
func TestEscapes(t *testing.T) {
	ws := newFake(t)
	world(t, ws)
	state := t.TempDir()
	p := openPlugin(t, ws, state, Config{})
	const a, b = "agent-a/session-1", "agent-b/session-1"
	enable(t, p, a, nil)
	enable(t, p, b, map[string]any{"scope": "output", "permission": "write"})
	out := filepath.Join(ws.current("agent-b", "session-1"), "output")
	secret := filepath.Join(ws.root, "secret")
	must(t, os.WriteFile(secret, []byte("secret"), 0o644))
	must(t, os.Symlink(secret, filepath.Join(out, "link")))
	must(t, os.Symlink("..", filepath.Join(out, "up")))
	must(t, os.Link(secret, filepath.Join(out, "hard")))
	must(t, syscall.Mkfifo(filepath.Join(out, "fifo"), 0o644))
	l, err := net.Listen("unix", filepath.Join(out, "sock"))
	must(t, err)
	defer l.Close()

	for _, tc := range []struct {
		path string
		code rpc.Code
		why  string
	}{
		{"../report.txt", rpc.CodeForbidden, "outside the scope"},
		{"a/../../report.txt", rpc.CodeForbidden, "outside the scope"},
		{secret, rpc.CodeForbidden, "absolute"},
		{"link", rpc.CodeForbidden, "symlink"},
		{"up/report.txt", rpc.CodeForbidden, "symlink"},
		{"hard", rpc.CodeForbidden, "hard link"},
		{"fifo", rpc.CodeForbidden, "FIFO"},
		{"sock", rpc.CodeForbidden, "not a regular file"},
		{".", rpc.CodeInvalidParams, "a directory"},
	} {
		start := time.Now()
		_, err := read(p, a, b, tc.path)
		refused(t, "read "+tc.path, err, tc.code, b, tc.why)
		if time.Since(start) > 2*time.Second {
			t.Errorf("read %s took %v: a refusal must not block", tc.path, time.Since(start))
		}
		if tc.path != "." && tc.path != "hard" { // a write over a hard link replaces the name only (see below)
			_, err = write(p, a, b, tc.path, []byte("x"))
			if err == nil {
				t.Errorf("write %s succeeded", tc.path)
			}
		}
	}
	if r, err := write(p, a, b, "hard", []byte("x")); err != nil || !r.OK {
		t.Fatalf("write over a hard link (the rename replaces the name, not the linked file): %+v %v", r, err)
	}
	if b, _ := os.ReadFile(secret); string(b) != "secret" {
		t.Fatalf("the file outside the scope changed: %q", b)
	}
	if fi, err := os.Lstat(filepath.Join(out, "link")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("the symlink was replaced: %v", err)
	}
	recs, err := ReadAudit(p.AuditDir())
	must(t, err)
	denied := map[string]bool{}
	for _, r := range recs {
		if r.Decision == Denied && r.Action == shareproto.ActionRead && r.Target == b && r.AgentID == "agent-a" {
			denied[r.Path] = r.Reason != ""
		}
	}
	for _, path := range []string{"../report.txt", secret, "link", "hard", "fifo", "sock", "up/report.txt"} {
		if !denied[path] {
			t.Errorf("the refused read of %s is not audited with its reason (audit %v)", path, denied)
		}
	}
}

// TestSwapForSymlink: a file swapped for a symlink out of the scope while reads go on is either
// read from inside or refused; the file outside is never read.
func TestSwapForSymlink(t *testing.T) {
	ws := newFake(t)
	world(t, ws)
	p := openPlugin(t, ws, t.TempDir(), Config{})
	const a, b = "agent-a/session-1", "agent-b/session-1"
	enable(t, p, a, nil)
	enable(t, p, b, nil)
	cur := ws.current("agent-b", "session-1")
	secret := filepath.Join(ws.root, "secret")
	must(t, os.WriteFile(secret, []byte("secret"), 0o644))
	must(t, os.WriteFile(filepath.Join(cur, "plain"), []byte("inside"), 0o644))
	must(t, os.Symlink(secret, filepath.Join(cur, "evil")))
	must(t, os.Mkdir(filepath.Join(cur, "d"), 0o755))
	must(t, os.WriteFile(filepath.Join(cur, "d", "f"), []byte("inside"), 0o644))
	must(t, os.Symlink(ws.root, filepath.Join(cur, "evildir")))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // swap f for the symlink and back, and the directory d for one to ws.root
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			tmp := filepath.Join(cur, "tmp")
			if i%2 == 0 {
				os.Symlink(secret, tmp)
				os.Rename(tmp, filepath.Join(cur, "f"))
				os.Rename(filepath.Join(cur, "d"), filepath.Join(cur, "d.away"))
				os.Symlink(ws.root, filepath.Join(cur, "d"))
			} else {
				os.WriteFile(tmp, []byte("inside"), 0o644)
				os.Rename(tmp, filepath.Join(cur, "f"))
				os.Remove(filepath.Join(cur, "d"))
				os.Rename(filepath.Join(cur, "d.away"), filepath.Join(cur, "d"))
			}
		}
	}()
	var ok, no int
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		for _, path := range []string{"f", "d/f", "d/secret"} {
			got, err := read(p, a, b, path)
			switch {
			case err == nil && string(got) == "inside":
				ok++
			case err == nil:
				close(stop)
				wg.Wait()
				t.Fatalf("read %s returned %q: the swap led it out of the scope", path, got)
			default:
				no++
			}
		}
	}
	close(stop)
	wg.Wait()
	if ok == 0 || no == 0 {
		t.Errorf("%d reads inside, %d refused: the swap never raced (want both)", ok, no)
	}
}

// TestWrite: a write is atomic (no partial file, the temporary file gone), owned by the runs'
// identity, keeps the replaced file's mode; a short stream, a too-large size and a target with a
// live run change nothing; the lease is held during the transfer and released after.
func TestWrite(t *testing.T) {
	ws := newFake(t)
	world(t, ws)
	p := openPlugin(t, ws, t.TempDir(), Config{MaxWrite: 1 << 20})
	const a, b = "agent-a/session-1", "agent-b/session-1"
	enable(t, p, a, nil)
	enable(t, p, b, map[string]any{"permission": "write"})
	cur := ws.current("agent-b", "session-1")
	must(t, os.Chmod(filepath.Join(cur, "report.txt"), 0o600))

	if r, err := write(p, a, b, "report.txt", []byte("replaced")); err != nil || !r.OK {
		t.Fatalf("write over report.txt: %+v %v", r, err)
	}
	fi, err := os.Stat(filepath.Join(cur, "report.txt"))
	must(t, err)
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("the replaced file's mode is %v, want 0600 kept", fi.Mode().Perm())
	}
	uid, gid := ws.RunIdentity()
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != uid || st.Gid != gid {
		t.Errorf("owner %d:%d, want the runs' %d:%d", st.Uid, st.Gid, uid, gid)
	}

	r, err := writeN(p, a, b, "report.txt", 100, []byte("short"))
	if err != nil || r.OK || !strings.Contains(r.Error, "ended after 5 of the 100 bytes") || !strings.Contains(r.Error, "report.txt") {
		t.Fatalf("a short stream: %+v %v, want a failed Result naming the byte counts", r, err)
	}
	_, err = writeN(p, a, b, "big", 2<<20, nil)
	refused(t, "a write over MaxWrite", err, rpc.CodeInvalidParams, b, "big", "too large", "1048576")
	ws.runs[key{"agent-b", "session-1"}] = 1
	_, err = write(p, a, b, "report.txt", []byte("during a run"))
	refused(t, "a write while the target has a live run", err, rpc.CodeConflict, b, "target busy", "live run")
	ws.runs[key{"agent-b", "session-1"}] = 0
	if got, _ := os.ReadFile(filepath.Join(cur, "report.txt")); string(got) != "replaced" {
		t.Errorf("report.txt holds %q after the failed writes, want the last good write", got)
	}
	ents, _ := os.ReadDir(cur)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".allox-share-") {
			t.Errorf("a temporary file is left: %s", e.Name())
		}
	}
	if n := ws.held(key{"agent-b", "session-1"}); n != 0 {
		t.Errorf("%d leases held after the transfers", n)
	}
}

// TestBusyAndLease: a target rolling back refuses share access (conflict, target busy); a read's
// lease is held until its stream ends.
func TestBusyAndLease(t *testing.T) {
	ws := newFake(t)
	world(t, ws)
	p := openPlugin(t, ws, t.TempDir(), Config{})
	const a, b = "agent-a/session-1", "agent-b/session-1"
	enable(t, p, a, nil)
	enable(t, p, b, nil)
	kb := key{"agent-b", "session-1"}
	ws.busy[kb] = true
	_, err := read(p, a, b, "report.txt")
	refused(t, "read during a rollback", err, rpc.CodeConflict, b, "report.txt", "target busy")
	ws.busy[kb] = false

	res, err := call(p, a, shareproto.ActionRead, map[string]any{"target": b, "path": "report.txt"})
	must(t, err)
	if ws.held(kb) != 1 {
		t.Fatalf("no lease held between the decision and the stream")
	}
	srv, cli := pair(t)
	go res.(plugin.Relay)(srv)
	if _, err := readStream(cli, nil); err != nil {
		t.Fatal(err)
	}
	cli.Close()
	deadline := time.Now().Add(5 * time.Second)
	for ws.held(kb) != 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if ws.held(kb) != 0 {
		t.Fatal("the lease is still held after the stream ended")
	}

	// A decided read whose stream never starts releases its lease after the idle timeout.
	p2 := openPlugin(t, ws, t.TempDir(), Config{Idle: 100 * time.Millisecond})
	enable(t, p2, a, nil)
	enable(t, p2, b, nil)
	if _, err := call(p2, a, shareproto.ActionRead, map[string]any{"target": b, "path": "report.txt"}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	if ws.held(kb) != 0 {
		t.Fatal("an abandoned read still holds its lease")
	}
}

// TestStateSurvives: the share state survives a reopen (a daemon restart) and is dropped by the
// session's deletion; too large a read names the limit.
func TestStateSurvives(t *testing.T) {
	ws := newFake(t)
	world(t, ws)
	state := t.TempDir()
	p := openPlugin(t, ws, state, Config{MaxRead: 10})
	const a, b = "agent-a/session-1", "agent-b/session-1"
	enable(t, p, a, nil)
	enable(t, p, b, map[string]any{"scope": "output", "permission": "write"})
	_, err := read(p, a, b, "result.txt")
	refused(t, "a read over MaxRead", err, rpc.CodeInvalidParams, b, "result.txt", "too large", "at most 10 bytes")

	p = openPlugin(t, ws, state, Config{})
	got, err := read(p, a, b, "result.txt")
	if err != nil || string(got) != "result of agent-b/session-1\n" {
		t.Fatalf("read after a restart: %q %v", got, err)
	}
	if diff := cmp.Diff(`{"enabled":true,"scope":"output","permission":"write"}`, string(p.info("agent-b", "session-1"))); diff != "" {
		t.Errorf("session info (-want +got):\n%s", diff)
	}
	must(t, p.deleted("agent-b", "session-1"))
	p = openPlugin(t, ws, state, Config{})
	if _, ok := p.get(key{"agent-b", "session-1"}); ok {
		t.Fatal("a deleted session's share state came back after a restart")
	}
	if _, ok := p.get(key{"agent-a", "session-1"}); !ok {
		t.Fatal("the other session's share state is gone")
	}
}
