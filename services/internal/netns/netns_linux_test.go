package netns

import (
	"errors"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/allox-os/allox/internal/testenv"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// newNS creates a namespace in a fresh directory and opens it; both go at the test's end.
func newNS(t *testing.T) (string, *os.File) {
	t.Helper()
	testenv.Root(t, "to create network namespaces", "./services/internal/netns")
	path := filepath.Join(t.TempDir(), "ns")
	if err := Create(path); err != nil {
		t.Fatalf("Create: %v", err)
	}
	t.Cleanup(func() { _ = Remove(path) })
	f, err := Open(path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { f.Close() })
	return path, f
}

// mounted reports whether path is a mount point in this mount namespace.
func mounted(t *testing.T, path string) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 4 && f[4] == path {
			return true
		}
	}
	return false
}

func TestCreateOnlyLoopbackUp(t *testing.T) {
	path, ns := newNS(t)
	if !mounted(t, path) {
		t.Fatalf("%s is not a mount point", path)
	}
	var links []netlink.Link
	var routes []netlink.Route
	err := Do(ns, func() error {
		var err error
		if links, err = netlink.LinkList(); err != nil {
			return err
		}
		routes, err = netlink.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_TABLE)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(links) != 1 || links[0].Attrs().Name != "lo" || links[0].Attrs().Flags&net.FlagUp == 0 {
		t.Fatalf("links %v, want only lo, up", links)
	}
	if len(routes) == 0 {
		t.Error("no route at all: lo's local routes are missing (is lo up?)")
	}
	for _, r := range routes { // every table: only lo's own
		if r.LinkIndex != links[0].Attrs().Index {
			t.Errorf("route not on lo: %v", r)
		}
	}
	for _, addr := range []string{"127.0.0.1:0", "[::1]:0"} {
		l, err := Listen(ns, "tcp", addr)
		if err != nil {
			t.Errorf("Listen %s: %v", addr, err)
			continue
		}
		l.Close()
	}
}

func TestCreateRefusesAnExistingPath(t *testing.T) {
	path, _ := newNS(t)
	if err := Create(path); !errors.Is(err, fs.ErrExist) {
		t.Errorf("Create over a namespace: %v, want fs.ErrExist", err)
	}
	if _, err := Open(path); err != nil {
		t.Errorf("the namespace is gone after a refused Create: %v", err)
	}
}

func TestCreateLeavesNothingOnFailure(t *testing.T) {
	testenv.Root(t, "to create network namespaces", "./services/internal/netns")
	path := filepath.Join(t.TempDir(), "missing-dir", "ns")
	if err := Create(path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Create in a missing dir: %v, want fs.ErrNotExist", err)
	}
}

func TestOpenRefusesAPlainFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stale")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if f, err := Open(path); !errors.Is(err, ErrNotNamespace) {
		t.Errorf("Open(plain file) = %v, %v; want ErrNotNamespace", f, err)
	}
	if _, err := Open(filepath.Join(t.TempDir(), "none")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Open(missing) = %v, want fs.ErrNotExist", err)
	}
}

func TestOpenRefusesAnotherNamespaceType(t *testing.T) {
	testenv.Root(t, "to bind-mount a namespace file", "./services/internal/netns")
	path := filepath.Join(t.TempDir(), "uts")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("/proc/self/ns/uts", path, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = Remove(path) })
	if _, err := Open(path); !errors.Is(err, ErrNotNamespace) {
		t.Errorf("Open(uts namespace) = %v, want ErrNotNamespace", err)
	}
}

func TestRemove(t *testing.T) {
	path, ns := newNS(t)
	if err := Remove(path); err != nil {
		t.Fatal(err)
	}
	if mounted(t, path) {
		t.Error("still mounted after Remove")
	}
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("file after Remove: %v", err)
	}
	// A descriptor open on it stays usable (MNT_DETACH); the namespace ends with it.
	l, err := Listen(ns, "tcp", "127.0.0.1:0")
	if err != nil {
		t.Errorf("Listen in a removed namespace still open: %v", err)
	} else {
		l.Close()
	}
	if err := Remove(path); err != nil {
		t.Errorf("Remove of a missing one: %v", err)
	}
	stale := filepath.Join(t.TempDir(), "stale")
	if err := os.WriteFile(stale, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Remove(stale); err != nil {
		t.Errorf("Remove of an unmounted file: %v", err)
	}
	if _, err := os.Lstat(stale); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("unmounted file after Remove: %v", err)
	}
}

func TestRemoveAll(t *testing.T) {
	testenv.Root(t, "to create network namespaces", "./services/internal/netns")
	dir := t.TempDir()
	var paths []string
	for _, n := range []string{"a", "b", "c"} {
		p := filepath.Join(dir, n)
		if err := Create(p); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	if err := os.WriteFile(filepath.Join(dir, "crashed-before-mount"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	for _, p := range paths {
		if mounted(t, p) {
			t.Errorf("%s still mounted", p)
		}
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("left in dir: %v", left)
	}
	if err := RemoveAll(filepath.Join(dir, "missing")); err != nil {
		t.Errorf("RemoveAll(missing) = %v", err)
	}
}

// TestListenIsolated: a listener made inside A is reachable from A only, not from B nor from the
// test's own namespace, and the thread that made it is back in the test's namespace.
func TestListenIsolated(t *testing.T) {
	_, a := newNS(t)
	_, b := newNS(t)
	l, err := Listen(a, "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_, _ = io.WriteString(c, "hello from A")
			c.Close()
		}
	}()
	addr := l.Addr().String()
	dial := func(ns *os.File) (string, error) {
		var got []byte
		err := Do(ns, func() error {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				return err
			}
			defer c.Close()
			got, err = io.ReadAll(c)
			return err
		})
		return string(got), err
	}
	if got, err := dial(a); err != nil || got != "hello from A" {
		t.Errorf("from A: %q, %v", got, err)
	}
	if got, err := dial(b); !errors.Is(err, unix.ECONNREFUSED) {
		t.Errorf("from B: %q, %v; want ECONNREFUSED", got, err)
	}
	if c, err := net.Dial("tcp", addr); !errors.Is(err, unix.ECONNREFUSED) {
		if c != nil {
			c.Close()
		}
		t.Errorf("from the test's namespace: %v; want ECONNREFUSED", err)
	}
}

// TestDoRestoresTheThread: after many Do calls, no thread of the process is left in a session's
// namespace (every thread's net namespace is the process's initial one).
func TestDoRestoresTheThread(t *testing.T) {
	_, ns := newNS(t)
	var inside, own unix.Stat_t
	if err := unix.Fstat(int(ns.Fd()), &inside); err != nil {
		t.Fatal(err)
	}
	if err := unix.Stat("/proc/self/ns/net", &own); err != nil {
		t.Fatal(err)
	}
	for range 50 {
		var in unix.Stat_t
		if err := Do(ns, func() error { return unix.Stat("/proc/thread-self/ns/net", &in) }); err != nil {
			t.Fatal(err)
		}
		if in.Ino != inside.Ino {
			t.Fatalf("fn ran in namespace inode %d, want %d", in.Ino, inside.Ino)
		}
	}
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		var st unix.Stat_t
		if err := unix.Stat("/proc/self/task/"+task.Name()+"/ns/net", &st); err != nil {
			continue // the thread ended
		}
		if st.Ino != own.Ino {
			t.Errorf("thread %s is in namespace %d, not the process's %d", task.Name(), st.Ino, own.Ino)
		}
	}
	if err := Do(nil, func() error { return nil }); err == nil {
		t.Error("Do(nil) ran")
	}
}

// BenchmarkDo measures one Do with an empty fn: the fresh locked goroutine and the two setns(2).
//
//	sudo go test -run '^$' -bench Do -benchtime 20000x ./services/internal/netns/
func BenchmarkDo(b *testing.B) {
	testenv.Root(b, "to create network namespaces", "./services/internal/netns")
	path := filepath.Join(b.TempDir(), "ns")
	if err := Create(path); err != nil {
		b.Fatal(err)
	}
	defer Remove(path)
	ns, err := Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer ns.Close()
	b.ResetTimer()
	for range b.N {
		if err := Do(ns, func() error { return nil }); err != nil {
			b.Fatal(err)
		}
	}
}
