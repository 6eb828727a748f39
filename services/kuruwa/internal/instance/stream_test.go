package instance

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/allox-os/allox/services/kuruwa/internal/wire"
	"golang.org/x/sys/unix"
)

// serving is an instance daemon on a listener of its own, with one idle terminal "a".
func serving(t *testing.T) (*Server, string) {
	t.Helper()
	dir := t.TempDir()
	state, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { state.Close() })
	s := NewServer("test", state)
	sock := filepath.Join(dir, "sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Serve(ctx, ln) }()
	t.Cleanup(func() { cancel(); <-done })
	if _, err := s.start(wire.StartArgs{ID: "a", Name: "a", Argv: []string{"sleep", "100"}}); err != nil {
		t.Fatal(err)
	}
	return s, sock
}

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// A client that follows a quiet terminal's output and hangs up is let go at once, not at the
// terminal's next output: otherwise every tail of an idle shell that a client abandons (each
// one through the main daemon is a connection of its own) holds a descriptor here until then.
func TestAbandonedTailOfAQuietTerminalIsLetGo(t *testing.T) {
	_, sock := serving(t)
	before := openFDs(t)
	for range 50 {
		nc, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		if err := wire.NewConn(nc).Call("tail", wire.TailArgs{ID: "a", Follow: true}, nil); err != nil {
			t.Fatal(err)
		}
		nc.Close()
	}
	var now int
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if now = openFDs(t); now <= before {
			return
		}
	}
	t.Fatalf("%d descriptors open before 50 abandoned tails of a quiet terminal, %d after", before, now)
}

// A client that makes accept fail (here by leaving the daemon no free descriptor for the
// connection) must not end the instance: the daemon waits the failure out and serves the
// connection, and the terminals, other tenants' among them, keep running.
func TestAcceptFailureLeavesTheInstanceServing(t *testing.T) {
	s, sock := serving(t)
	nc, err := net.Dial("unix", sock) // queued before the limit, accepted after it
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	var old unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	free, err := unix.Dup(0) // the lowest free descriptor
	if err != nil {
		t.Fatal(err)
	}
	unix.Close(free)
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: uint64(free), Max: old.Max}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // accept fails with EMFILE meanwhile
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	if err := nc.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	var h wire.Hello
	if err := wire.NewConn(nc).Call("hello", nil, &h); err != nil {
		t.Fatalf("hello on the connection queued while accept failed: %v", err)
	}
	e, err := s.lookup("a")
	if err != nil {
		t.Fatal(err)
	}
	if st := e.t.Status(); !st.Running {
		t.Fatalf("terminal ended after accept failed: %+v", st)
	}
}
