package instance

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/allox-os/allox/internal/term"
	"github.com/allox-os/allox/services/kuruwa/internal/wire"
)

// heldStart has s start its terminals through spawn, which holds each start, its program already
// running, until release is closed; started receives each terminal.
func heldStart(t *testing.T, s *Server) (started chan *term.Terminal, release chan struct{}) {
	started, release = make(chan *term.Terminal, 1), make(chan struct{})
	s.spawn = func(spec term.Spec, transcript *os.File) (*term.Terminal, error) {
		tm, err := term.Start(spec, transcript)
		if err == nil {
			t.Cleanup(func() { _ = tm.Signal(syscall.SIGKILL) })
			started <- tm
		}
		<-release
		return tm, err
	}
	return started, release
}

// startAsync runs s.start of id in the background and returns its result.
func startAsync(s *Server, id string) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := s.start(wire.StartArgs{ID: id, Name: id, Argv: []string{"sleep", "100"}})
		done <- err
	}()
	return done
}

// A start can take as long as the workspace daemon takes to start a session's run (up to 30 s);
// the other terminals' requests meanwhile are answered, not made to wait for it.
func TestRequestsAreAnsweredWhileAStartIsUnderWay(t *testing.T) {
	s := newServer(t)
	startIn(t, s, "a", "sleep", "100")
	started, release := heldStart(t, s)
	startDone := startAsync(s, "slow")
	<-started
	answered := make(chan error, 1)
	go func() {
		_ = s.list()
		_, err := s.lookup("a")
		answered <- err
	}()
	if err := whileHeld(t, answered, release, "ls and status of another terminal waited for a start under way"); err != nil {
		t.Fatal(err)
	}
	close(release)
	if err := <-startDone; err != nil {
		t.Fatal(err)
	}
}

// While a start is under way its id is taken: a second start of the same id is refused, not
// started beside it.
func TestAStartUnderWayHoldsItsID(t *testing.T) {
	s := newServer(t)
	started, release := heldStart(t, s)
	first := startAsync(s, "x")
	<-started
	second := startAsync(s, "x")
	err := whileHeld(t, second, release, "a second start of an id being started was not refused at once")
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != wire.CodeConflict {
		t.Fatalf("a second start of an id being started: %v, want a conflict", err)
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
}

// A start that ends after shutdown took its list of terminals must not leave its program running
// past the daemon: it kills and reaps it, leaves no terminal or transcript, and says why.
func TestAStartThatEndsAfterShutdownLeavesNothingRunning(t *testing.T) {
	s := newServer(t)
	started, release := heldStart(t, s)
	startDone := startAsync(s, "late")
	tm := <-started
	killed := make(chan struct{})
	go func() { s.killAll(); close(killed) }()
	whileHeld(t, killed, release, "shutdown waited for a start under way")
	close(release)
	if err := <-startDone; err == nil || !strings.Contains(err.Error(), "shutting down") {
		t.Fatalf("a start that ended after shutdown: %v, want an error saying the instance is shutting down", err)
	}
	select {
	case <-tm.Exited():
	default:
		t.Fatalf("a start refused at shutdown left its program running: %+v", tm.Status())
	}
	if _, err := s.lookup("late"); err == nil {
		t.Fatal("a start refused at shutdown left its terminal listed")
	}
	if m, _ := filepath.Glob(filepath.Join(s.state.Name(), "*.transcript")); len(m) != 0 {
		t.Fatalf("a start refused at shutdown left its transcript: %v", m)
	}
}

// whileHeld waits, while a start is held, for what ch delivers; if nothing comes within 10 s it
// releases the start and fails with failure.
func whileHeld[T any](t *testing.T, ch <-chan T, release chan struct{}, failure string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		close(release)
		t.Fatal(failure)
		panic("unreachable")
	}
}
