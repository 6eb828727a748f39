package supervise

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/allox-os/allox/internal/manifest"
	"github.com/google/go-cmp/cmp"
)

func TestRestartWithBackoff(t *testing.T) {
	s, rec := start(t, Config{}, sh("fail", manifest.RestartOnFailure, "exit 3"))
	rec.await(t, "fail exited 3", 5)
	s.Stop()
	var delays []time.Duration
	rec.mu.Lock()
	for _, e := range rec.events {
		if e.Kind == Restarting {
			delays = append(delays, e.Delay)
		}
	}
	rec.mu.Unlock()
	want := []time.Duration{10, 20, 40, 40}
	for i := range want {
		want[i] *= time.Millisecond
	}
	if diff := cmp.Diff(want, delays[:4]); diff != "" {
		t.Errorf("restart delays (-want +got):\n%s", diff)
	}
}

func TestPolicies(t *testing.T) {
	for _, tc := range []struct {
		restart string
		status  int
		want    bool
	}{
		{manifest.RestartAlways, 0, true},
		{manifest.RestartAlways, 1, true},
		{manifest.RestartAlways, manifest.ExitOneShot, false},
		{manifest.RestartOnFailure, 0, false},
		{manifest.RestartOnFailure, 137, true},
		{manifest.RestartOnFailure, manifest.ExitOneShot, false},
		{manifest.RestartNever, 1, false},
	} {
		if got := restarts(tc.restart, tc.status); got != tc.want {
			t.Errorf("restarts(%s, %d) = %v, want %v", tc.restart, tc.status, got, tc.want)
		}
	}
	b := Backoff{Min: 1, Max: 5, Reset: 10}
	for _, tc := range [][3]time.Duration{{0, 0, 1}, {1, 0, 2}, {4, 3, 5}, {5, 3, 5}, {5, 11, 1}} {
		if got := b.next(tc[0], tc[1]); got != tc[2] {
			t.Errorf("next(%v, ran %v) = %v, want %v", tc[0], tc[1], got, tc[2])
		}
	}
}

func TestOneShotIsNotRestarted(t *testing.T) {
	_, rec := start(t, Config{}, sh("once", manifest.RestartAlways, fmt.Sprintf("exit %d", manifest.ExitOneShot)))
	rec.await(t, "once done 99", 1)
	time.Sleep(100 * time.Millisecond)
	want := []string{"once started", "once ready", "once exited 99", "once done 99"}
	if diff := cmp.Diff(want, rec.lines()); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

func TestStartFailure(t *testing.T) {
	_, rec := start(t, Config{}, manifest.Service{Name: "ghost", Restart: manifest.RestartNever, Command: []string{"/nonexistent/ghost"}})
	rec.await(t, "ghost done 127", 1)
	want := []string{"ghost start-failed", "ghost exited 127", "ghost not-ready", "ghost done 127"}
	if diff := cmp.Diff(want, rec.lines()); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

func TestCriticalEndsForGood(t *testing.T) {
	svc := sh("agent", manifest.RestartNever, "exit 0")
	svc.Critical = true
	s, _ := start(t, Config{}, svc)
	select {
	case name := <-s.Critical():
		if name != "agent" {
			t.Errorf("Critical() = %q", name)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no critical exit reported")
	}
}

// TestRestartBudget: a critical service that keeps failing is restarted MaxRestarts times, then
// ends for good and is reported critical (init powers off); one that exits 0 is not restarted.
func TestRestartBudget(t *testing.T) {
	svc := sh("agent", manifest.RestartOnFailure, "exit 3")
	svc.Critical, svc.MaxRestarts = true, 2
	s, rec := start(t, Config{}, svc)
	select {
	case <-s.Critical():
	case <-time.After(10 * time.Second):
		t.Fatal("no critical exit after the budget was spent")
	}
	got := rec.lines(Started, Exited, Restarting, Done)
	want := []string{"agent started", "agent exited 3", "agent restarting", "agent started", "agent exited 3",
		"agent restarting", "agent started", "agent exited 3", "agent done 3"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	warned := false
	rec.mu.Lock()
	for _, e := range rec.events {
		warned = warned || e.Kind == Warning && errors.Is(e.Err, ErrRestartBudget)
	}
	rec.mu.Unlock()
	if !warned {
		t.Error("no warning that the restart budget is spent")
	}

	ok := sh("finished", manifest.RestartOnFailure, "exit 0")
	ok.Critical, ok.MaxRestarts = true, 5
	s, rec = start(t, Config{}, ok)
	select {
	case <-s.Critical():
	case <-time.After(10 * time.Second):
		t.Fatal("an agent that exited 0 was not final")
	}
	if got := rec.lines(Started); len(got) != 1 {
		t.Errorf("started %d times; want once: exit 0 is not a failure", len(got))
	}
}

// TestStartOneFirst: Start(name) runs that service alone; Start() the rest, once; Stop before
// the rest started does not wait for them.
func TestStartOneFirst(t *testing.T) {
	rec := newRecorder()
	s, err := New(Config{Notify: rec.notify, StopTimeout: 2 * time.Second}, reaper, []manifest.Service{
		sh("agent", manifest.RestartNever, "exec sleep 100"), sh("daemon", manifest.RestartNever, "exec sleep 100")})
	if err != nil {
		t.Fatal(err)
	}
	s.Start("agent")
	rec.await(t, "agent ready", 1)
	time.Sleep(100 * time.Millisecond)
	if got := rec.lines(Started); len(got) != 1 {
		t.Fatalf("started %q; want the agent alone", got)
	}
	select {
	case <-s.Booted():
		t.Fatal("booted before the other services started")
	default:
	}
	began := time.Now()
	s.Stop()
	if d := time.Since(began); d > 3*time.Second {
		t.Errorf("Stop took %v: it waited for a service that never started", d)
	}
	s.Start() // after Stop: nothing more runs
	time.Sleep(100 * time.Millisecond)
	if got := rec.lines(Started); len(got) != 1 {
		t.Errorf("started %q after Stop; want the agent alone", got)
	}
}

// TestDependencyOrder: B is After A, whose TCP check passes only 300 ms after it starts.
func TestDependencyOrder(t *testing.T) {
	addr := freeAddr(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	a := manifest.Service{Name: "a", Restart: manifest.RestartAlways, Command: []string{exe},
		Env: map[string]string{"SUPERVISE_TEST_LISTEN": addr}, Ready: &manifest.Ready{TCP: addr}}
	dir := t.TempDir()
	b := sh("b", manifest.RestartNever, "touch "+dir+"/b.ready; exec sleep 100")
	b.After, b.Ready = []string{"a"}, &manifest.Ready{Path: filepath.Join(dir, "b.ready")}
	s, rec := start(t, Config{Root: "/"}, a, b)
	select {
	case <-s.Booted():
	case <-time.After(10 * time.Second):
		t.Fatalf("not booted; events: %q", rec.lines())
	}
	want := []string{"a started", "a ready", "b started", "b ready"}
	if diff := cmp.Diff(want, rec.lines(Started, Ready)); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

func TestNotReadyStillBoots(t *testing.T) {
	svc := sh("slow", manifest.RestartNever, "exec sleep 100")
	svc.Ready = &manifest.Ready{Path: "/nonexistent/ready"}
	dep := sh("dep", manifest.RestartNever, "exec sleep 100")
	dep.After = []string{"slow"}
	s, rec := start(t, Config{ReadyTimeout: 200 * time.Millisecond}, svc, dep)
	select {
	case <-s.Booted():
	case <-time.After(10 * time.Second):
		t.Fatalf("not booted; events: %q", rec.lines())
	}
	want := []string{"slow started", "slow not-ready", "dep warning", "dep started", "dep ready"}
	if diff := cmp.Diff(want, rec.lines(Started, Ready, NotReady, Warning)); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

func TestStopInReverseOrder(t *testing.T) {
	s, rec := start(t, Config{},
		sh("a", manifest.RestartAlways, "exec sleep 100"),
		sh("b", manifest.RestartAlways, "exec sleep 100"),
		sh("c", manifest.RestartAlways, "exec sleep 100"))
	<-s.Booted()
	s.Stop()
	want := []string{"c exited 143", "b exited 143", "a exited 143"}
	if diff := cmp.Diff(want, rec.lines(Exited)); diff != "" {
		t.Errorf("exits (-want +got):\n%s", diff)
	}
}

func TestStopEscalatesToKill(t *testing.T) {
	var console syncBuffer
	s, rec := start(t, Config{StopTimeout: 200 * time.Millisecond, Console: &console},
		sh("stubborn", manifest.RestartAlways, `trap "" TERM; echo trapped; sleep 100 & wait`))
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(console.String(), "[stubborn] trapped"); {
		if time.Now().After(deadline) {
			t.Fatal("the service never said it trapped SIGTERM")
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.Stop()
	want := []string{"stubborn warning", "stubborn exited 137"}
	if diff := cmp.Diff(want, rec.lines(Exited, Warning)); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func TestNewRejectsLaterDependency(t *testing.T) {
	b := sh("b", manifest.RestartNever, "true")
	b.After = []string{"a"}
	_, err := New(Config{}, reaper, []manifest.Service{b, sh("a", manifest.RestartNever, "true")})
	if err == nil || !strings.Contains(err.Error(), "StartOrder") {
		t.Fatalf("New = %v, want an error about start order", err)
	}
}
