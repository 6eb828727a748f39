package instance

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/allox-os/allox/services/kuruwa/internal/wire"
	"golang.org/x/sys/unix"
)

// A terminal whose program cannot start leaves its transcript's descriptor closed once, and only
// once: a second close by the garbage collector, later, would hit whichever file had been given
// that descriptor number since (here a file the daemon opens next), and close it under its owner.
func TestFailedStartNeverClosesAnotherFilesDescriptor(t *testing.T) {
	dir := t.TempDir()
	state, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer state.Close()
	s := NewServer("test", state)
	for i := range 20 {
		_, err := s.start(wire.StartArgs{ID: "t" + string(rune('a'+i)), Argv: []string{"/nonexistent/kuruwa-test"}})
		if err == nil {
			t.Fatal("a missing program started")
		}
		// The daemon's next file takes the lowest free descriptor: the transcript's, if it was freed.
		next, err := os.Create(filepath.Join(dir, "next"))
		if err != nil {
			t.Fatal(err)
		}
		runtime.GC()
		runtime.GC() // finalizers run after the cycle that found the file unreachable
		for range 100 {
			runtime.Gosched()
		}
		var st unix.Stat_t
		if err := unix.Fstat(int(next.Fd()), &st); err != nil {
			t.Fatalf("after failed start %d the daemon's next file's descriptor %d: %v (closed by another file's finalizer)", i, next.Fd(), err)
		}
		next.Close()
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "*.transcript")); len(m) != 0 {
		t.Fatalf("transcripts of failed starts left behind: %v", m)
	}
}
