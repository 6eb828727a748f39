package tracked

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/allox-os/allox/services/internal/netns"
	"golang.org/x/sys/unix"
)

// sessionNS creates a network namespace in the test's state dir (outside every workspace) and
// opens it; both go at the test's end.
func (e *env) sessionNS(t *testing.T, name string) *os.File {
	t.Helper()
	path := filepath.Join(e.state, "netns-"+name)
	if err := netns.Create(path); err != nil {
		t.Fatalf("netns.Create: %v", err)
	}
	t.Cleanup(func() { _ = netns.Remove(path) })
	f, err := netns.Open(path)
	if err != nil {
		t.Fatalf("netns.Open: %v", err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// nsIno is the inode of a network namespace descriptor, as /proc/PID/ns/net names it.
func nsIno(t *testing.T, ns *os.File) string {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Fstat(int(ns.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("net:[%d]", st.Ino)
}

const (
	// listenPy serves "hello from the session" on 127.0.0.1:<port it prints> until killed.
	listenPy = `import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(8)
print(s.getsockname()[1], flush=True)
while True:
    c, _ = s.accept()
    c.sendall(b"hello from the session")
    c.close()
`
	// dialPy prints what 127.0.0.1:argv[1] sends, or the name of the error connecting.
	dialPy = `import socket, sys
try:
    c = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5)
    print(c.recv(100).decode())
except OSError as e:
    print(type(e).__name__)
`
	python = "/usr/bin/python3"
)

// listener starts a long run in ns serving listenPy and returns its port and run.
func (e *env) listener(t *testing.T, ns *os.File) (string, *Status) {
	t.Helper()
	req := e.req("s1", python, "-c", listenPy)
	req.Extra.NetNS, req.Timeout = ns, time.Minute
	st, err := e.m.Start(context.Background(), req)
	if err != nil {
		t.Fatalf("Start listener: %v", err)
	}
	t.Cleanup(func() { _ = e.m.Kill(st.RunID) })
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		out := e.output(t, st.RunID, "stdout")
		if port, ok := strings.CutSuffix(out, "\n"); ok {
			return port, st
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("the listener never printed its port; stderr %q", e.output(t, st.RunID, "stderr"))
	return "", nil
}

// dial runs dialPy in ns (nil: the guest's) against port and returns what it printed.
func (e *env) dial(t *testing.T, ns *os.File, managed bool, session, port string) string {
	t.Helper()
	req := e.req(session, python, "-c", dialPy, port)
	req.Extra.NetNS, req.Managed = ns, managed
	st := e.run(t, req)
	if st.State != StateExited || st.ExitCode != 0 {
		t.Fatalf("dial run: %+v; stderr %q", st, e.output(t, st.RunID, "stderr"))
	}
	return strings.TrimSpace(e.output(t, st.RunID, "stdout"))
}

// TestSessionNamespaceOnlyLoopback: a sandboxed run started in a session's namespace is in it,
// sees only lo and no IPv4 route, and loopback works there.
func TestSessionNamespaceOnlyLoopback(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.UnshareNet = true }) // NetNS wins over UnshareNet
	ns := e.sessionNS(t, "a")
	req := e.req("s1", "/bin/sh", "-c", "readlink /proc/self/ns/net; cat /proc/net/dev /proc/net/route")
	req.Extra.NetNS = ns
	st := e.run(t, req)
	if st.State != StateExited || st.ExitCode != 0 {
		t.Fatalf("run: %+v; stderr %q", st, e.output(t, st.RunID, "stderr"))
	}
	lines := strings.Split(strings.TrimSpace(e.output(t, st.RunID, "stdout")), "\n")
	if len(lines) < 1 || lines[0] != nsIno(t, ns) {
		t.Fatalf("the run is in %q, want the session's %s", lines, nsIno(t, ns))
	}
	var ifaces, routes []string
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		switch {
		case len(f) > 0 && strings.HasSuffix(f[0], ":"): // /proc/net/dev: "lo: 0 0 ..."
			ifaces = append(ifaces, strings.TrimSuffix(f[0], ":"))
		case len(f) > 0 && f[0] != "Inter-|" && f[0] != "face" && f[0] != "Iface":
			routes = append(routes, l)
		}
	}
	if len(ifaces) != 1 || ifaces[0] != "lo" {
		t.Errorf("interfaces %q, want only lo", ifaces)
	}
	if len(routes) != 0 {
		t.Errorf("routes %q, want none", routes)
	}
}

// TestSessionNamespaceListenerReach: a server left by run 1 on the session's loopback is reached
// by run 2 of the same namespace (sandboxed and managed), and by nothing else: not a run in
// another session's namespace, not a run in the guest's namespace, not the host itself.
func TestSessionNamespaceListenerReach(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.AllowManaged = true })
	a, b := e.sessionNS(t, "a"), e.sessionNS(t, "b")
	port, _ := e.listener(t, a)
	const hello, refused = "hello from the session", "ConnectionRefusedError"
	for _, c := range []struct {
		name    string
		ns      *os.File
		managed bool
		session string
		want    string
	}{
		{"run 2 in A", a, false, "s1", hello},
		{"managed run in A", a, true, "s1", hello},
		{"run in B", b, false, "s2", refused},
		{"managed run in B", b, true, "s2", refused},
		{"run in the guest's namespace", nil, false, "s2", refused},
	} {
		if got := e.dial(t, c.ns, c.managed, c.session, port); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
	conn, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", port), 5*time.Second)
	if err == nil {
		conn.Close()
		t.Errorf("the host's namespace reached the session's listener on port %s", port)
	} else if !errors.Is(err, unix.ECONNREFUSED) {
		t.Errorf("from the host's namespace: %v, want connection refused", err)
	}
}

// TestManagedRunInSessionNamespace: a managed run's launcher (the shell, pid $$) and its children are in the namespace.
func TestManagedRunInSessionNamespace(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.AllowManaged = true })
	ns := e.sessionNS(t, "a")
	req := e.req("s1", "/bin/sh", "-c", "readlink /proc/self/ns/net /proc/$$/ns/net")
	req.Managed, req.Extra.NetNS = true, ns
	st := e.run(t, req)
	want := nsIno(t, ns) + "\n" + nsIno(t, ns) + "\n"
	if got := e.output(t, st.RunID, "stdout"); st.State != StateExited || got != want {
		t.Errorf("managed run: %+v, namespaces %q, want %q", st, got, want)
	}
}

// TestSessionNamespaceRunOutlivesItsStartingThread: the launcher is forked from a thread that Do
// then switches back and returns to the runtime; Pdeathsig is tied to that thread, so the run
// must survive every goroutine and run that reuses it afterwards, and end by its own timeout.
func TestSessionNamespaceRunOutlivesItsStartingThread(t *testing.T) {
	e := newEnv(t, nil)
	ns := e.sessionNS(t, "a")
	req := e.req("s1", "sleep", "100")
	req.Extra.NetNS, req.Timeout = ns, 8*time.Second
	first, err := e.m.Start(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	waitProcs(t, first.Cgroup, 3) // bwrap, its init, sleep
	// Churn: many runs in and out of the namespace, and goroutines locking and unlocking threads,
	// so that the starting thread is reused.
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			r := e.req("s1", "true")
			if i%2 == 0 {
				r.Extra.NetNS = ns
			}
			st, err := e.m.Start(context.Background(), r)
			if err == nil {
				st, err = e.m.Wait(context.Background(), st.RunID)
			}
			if err != nil || st.State != StateExited {
				t.Errorf("churn run %d: %+v, %v", i, st, err)
			}
		})
	}
	for range 200 {
		wg.Go(func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			time.Sleep(time.Millisecond)
		})
	}
	wg.Wait()
	if err := netns.Do(ns, func() error { return nil }); err != nil {
		t.Fatal(err)
	}
	st, err := e.m.Get(first.RunID)
	if err != nil {
		t.Fatal(err)
	}
	if st.State != StateRunning {
		t.Fatalf("the first run ended while others ran: %+v", st)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err = e.m.Wait(ctx, first.RunID)
	if err != nil {
		t.Fatal(err)
	}
	if st.State != StateTimedOut || time.Since(st.Started) < req.Timeout {
		t.Errorf("first run: %+v, want timed out after %s", st, req.Timeout)
	}
}

// TestSessionNamespaceBwrapArgs: a run given a session's namespace gets no --unshare-net.
func TestSessionNamespaceBwrapArgs(t *testing.T) {
	f, err := os.Open(os.DevNull) // any descriptor: bwrapArgs only looks whether one is set
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, c := range []struct {
		unshare bool
		ns      *os.File
		want    bool
	}{{false, nil, false}, {true, nil, true}, {true, f, false}, {false, f, false}} {
		req := &StartRequest{Workspace: Workspace{Current: "/w/c", Shared: "/w/s", AgentDir: "/w"}, Argv: []string{"true"}}
		req.Extra.NetNS = c.ns
		args := bwrapArgs(&Config{UnshareNet: c.unshare}, req, "/w/c", "/t", nil)
		if got := strings.Contains(strings.Join(args, " "), "--unshare-net"); got != c.want {
			t.Errorf("UnshareNet %v, NetNS set %v: --unshare-net %v, want %v", c.unshare, c.ns != nil, got, c.want)
		}
	}
}

// BenchmarkStartInNamespace measures Start-to-exit of /bin/true in a session's network namespace
// and, interleaved in the same run, in the guest's: what entering the namespace (netns.Do around
// the fork) adds to a run's start.
//
//	sudo go test -run '^$' -bench StartInNamespace -benchtime 200x ./services/internal/tracked/
func BenchmarkStartInNamespace(b *testing.B) {
	e := newEnv(b, nil)
	path := filepath.Join(e.state, "netns-bench")
	if err := netns.Create(path); err != nil {
		b.Fatal(err)
	}
	defer netns.Remove(path)
	ns, err := netns.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer ns.Close()
	var guest, session []time.Duration
	startTrue := func(in *os.File, into *[]time.Duration) {
		req := e.req("s1", "/bin/true")
		req.Extra.NetNS = in
		t0 := time.Now()
		st := e.run(b, req)
		*into = append(*into, time.Since(t0))
		if st.State != StateExited || st.ExitCode != 0 {
			b.Fatalf("status %+v", st)
		}
	}
	b.ResetTimer()
	for range b.N {
		startTrue(nil, &guest)
		startTrue(ns, &session)
	}
	b.StopTimer()
	pg, ps := p50(guest), p50(session)
	b.ReportMetric(float64(pg.Microseconds()), "guest-p50-µs")
	b.ReportMetric(float64(ps.Microseconds()), "session-p50-µs")
	b.ReportMetric(float64((ps - pg).Microseconds()), "added-p50-µs")
	b.ReportMetric(float64(len(session)), "samples")
}
