package daemon_test

import (
	"encoding/json"
	"errors"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/allox-os/allox/services/kuruwa/internal/entry"
	"github.com/allox-os/allox/services/kuruwa/internal/wire"
)

// call sends one request on a connection of its own; unlike f.dial it may run outside the
// test's goroutine (in a hook).
func call(entryPath, op string, args, out any) error {
	uc, err := entry.Dial(entryPath)
	if err != nil {
		return err
	}
	defer uc.Close()
	return wire.NewConn(uc).Call(op, args, out)
}

// onceAt sets f's daemon to run do the first time it reaches point, and returns the channel
// that do's error is sent on.
func onceAt(f *fixture, point string, do func() error) <-chan error {
	done := make(chan error, 1)
	var once sync.Once
	f.d.SetHook(func(p string) {
		if p == point {
			once.Do(func() { done <- do() })
		}
	})
	return done
}

// instanceSocket is the socket of instance name, as the management entry's ls shows it.
func instanceSocket(f *fixture, name string) string {
	f.t.Helper()
	var ls wire.LsResult
	if err := json.Unmarshal([]byte(f.must(f.mgmt(), "ls", "--instances", "--json")), &ls); err != nil {
		f.t.Fatal(err)
	}
	for _, in := range ls.Instances {
		if in.Name == name {
			return in.Socket
		}
	}
	f.t.Fatalf("no instance %s", name)
	return ""
}

// A gc served while a start waits on its instance daemon, which does not list the terminal yet,
// leaves it alone: the start's success is a terminal that answers by its name.
func TestGCDuringStartKeepsTheName(t *testing.T) {
	f := newDaemon(t, boxConfig)
	var removed []string
	gc := onceAt(f, "start.reserved", func() error { return call(f.mgmt(), "gc", nil, &removed) })
	f.must(f.mgmt(), "start", "fresh", "--instance", "host", "--", "sleep", "60")
	if err := <-gc; err != nil {
		t.Fatal(err)
	}
	if len(removed) != 0 {
		t.Errorf("gc during the start removed %v", removed)
	}
	if st := f.status("fresh"); !st.Running {
		t.Fatalf("the started terminal is not running: %+v", st)
	}
}

// An instance daemon that cannot be reached for ls says nothing of its terminals: gc forgets
// none of them.
func TestGCForgetsNothingWhenAnInstanceDoesNotAnswer(t *testing.T) {
	f := newDaemon(t, boxConfig)
	f.must(f.mgmt(), "instance", "start", "plain", "--name", "p")
	f.must(f.mgmt(), "start", "job", "--instance", "p", "--", "sleep", "60")
	sock := instanceSocket(f, "p")
	if err := os.Rename(sock, sock+".away"); err != nil {
		t.Fatal(err)
	}
	f.d.DropIdleConnections() // the next request dials, and fails
	var removed []string
	err := call(f.mgmt(), "gc", nil, &removed)
	if err := os.Rename(sock+".away", sock); err != nil {
		t.Fatal(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) != 0 {
		t.Errorf("gc removed %v when the instance daemon could not be asked", removed)
	}
	if st := f.status("job"); !st.Running {
		t.Fatalf("the terminal is not running: %+v", st)
	}
}

// killInstanceDaemon kills instance name's daemon and waits until the instance is invalid.
func killInstanceDaemon(f *fixture, name string) {
	f.t.Helper()
	var ls wire.LsResult
	pid := 0
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if err := json.Unmarshal([]byte(f.must(f.mgmt(), "ls", "--instances", "--json")), &ls); err != nil {
			f.t.Fatal(err)
		}
		valid := false
		for _, in := range ls.Instances {
			if in.Name == name && in.Valid {
				valid = true
				if pid == 0 {
					pid = in.PID
					if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
						f.t.Fatal(err)
					}
				}
			}
		}
		if !valid && pid != 0 {
			return
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("instance %s still valid after its daemon (pid %d) was killed", name, pid)
		}
	}
}

// clean naming the id of a terminal cleaned earlier is refused when the terminal now under that
// name is gone with its instance: the stale id never removes the new terminal.
func TestCleanOfAGoneTerminalRefusesAStaleID(t *testing.T) {
	f := newDaemon(t, boxConfig)
	f.must(f.mgmt(), "instance", "start", "plain", "--name", "p")
	var old wire.TermInfo
	if err := json.Unmarshal([]byte(f.must(f.mgmt(), "start", "x", "--instance", "p", "--json", "--", "sleep", "60")), &old); err != nil {
		t.Fatal(err)
	}
	f.must(f.mgmt(), "clean", "x", "--force")
	f.must(f.mgmt(), "start", "x", "--instance", "p", "--", "sleep", "60")
	killInstanceDaemon(f, "p")
	err := call(f.mgmt(), "clean", wire.CleanArgs{Name: "x", ID: old.ID}, nil)
	wantCode(t, err, wire.CodeGone)
	if out := f.must(f.mgmt(), "ls"); !strings.Contains(out, "x\t") || strings.Contains(out, old.ID) {
		t.Fatalf("the new x is not listed as it was:\n%s", out)
	}
}

// Cleaning a terminal that is gone with its instance revokes the grants on it, as cleaning a
// live one does: the connections that relied on them are closed.
func TestCleanOfAGoneTerminalRevokesItsGrants(t *testing.T) {
	f := newDaemon(t, boxConfig)
	f.must(f.mgmt(), "instance", "start", "plain", "--name", "p")
	f.must(f.mgmt(), "start", "x", "--instance", "p", "--", "sleep", "60")
	f.must(f.mgmt(), "grant", "other", "--terminal", "x")
	conn := f.dial(f.entry("other"))
	if err := conn.Call("status", wire.TermArgs{Name: "x"}, nil); err != nil {
		t.Fatal(err)
	}
	killInstanceDaemon(f, "p")
	f.must(f.mgmt(), "clean", "x")
	if err := conn.Call("whoami", nil, nil); err == nil {
		t.Fatal("the connection that relied on the grant on the cleaned terminal still answers")
	}
}

// A start that fails removes its own reservation only: when its instance was destroyed while
// the start ran and another start took the name, that other terminal keeps it.
func TestFailedStartLeavesTheNameItLostToAnother(t *testing.T) {
	f := newDaemon(t, boxConfig)
	f.must(f.mgmt(), "instance", "start", "plain", "--name", "p")
	retake := onceAt(f, "start.failed", func() error {
		if err := call(f.mgmt(), "clean", wire.CleanArgs{Instance: "p", Force: true}, nil); err != nil {
			return err
		}
		return call(f.mgmt(), "start", wire.StartArgs{Name: "x", Instance: "host", Argv: []string{"sleep", "60"}}, nil)
	})
	// The instance daemon refuses the size, after the name was reserved.
	err := call(f.mgmt(), "start", wire.StartArgs{Name: "x", Instance: "p", Argv: []string{"sleep", "60"}, Cols: 5000}, nil)
	wantCode(t, err, wire.CodeBadRequest)
	if err := <-retake; err != nil {
		t.Fatal(err)
	}
	if st := f.status("x"); !st.Running || st.Instance != "host" {
		t.Fatalf("the terminal that took the name: %+v", st)
	}
}

// clean --instance without --force never destroys a terminal, however close a start comes: a
// start served after the clean counted the instance's terminals is refused.
func TestCleanInstanceWithoutForceNeverDestroysAStartedTerminal(t *testing.T) {
	f := newDaemon(t, boxConfig)
	f.must(f.mgmt(), "instance", "start", "plain", "--name", "p")
	started := onceAt(f, "clean.checked", func() error {
		return call(f.mgmt(), "start", wire.StartArgs{Name: "late", Instance: "p", Argv: []string{"sleep", "60"}}, nil)
	})
	if err := call(f.mgmt(), "clean", wire.CleanArgs{Instance: "p"}, nil); err != nil {
		t.Fatal(err)
	}
	err := <-started
	if err == nil {
		t.Fatal("a start succeeded in an instance that a clean without --force then destroyed")
	}
	wantCode(t, err, wire.CodeGone)
	if out := f.must(f.mgmt(), "ls"); strings.Contains(out, "late") {
		t.Fatalf("the refused start left a terminal:\n%s", out)
	}
}

// A tenant.add served while the daemon shuts down is refused: it opens no entry that nothing
// would close, and Run returns.
func TestAddTenantDuringShutdownIsRefused(t *testing.T) {
	f := newDaemon(t, boxConfig)
	added := onceAt(f, "shutdown.closed", func() error { return f.d.AddTenant("late") })
	stopped := make(chan struct{})
	go func() { f.stop(); close(stopped) }()
	err := <-added
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		// A connection ends the late entry's accept loop (the daemon is closing), so the test ends.
		if uc, err := entry.Dial(f.d.TenantEntry("late")); err == nil {
			uc.Close()
		}
		<-stopped
		t.Fatal("Run did not return 10 s after shutdown began: the late entry's accept loop held it")
	}
	wantCode(t, err, wire.CodeGone)
	if _, err := os.Stat(f.d.TenantEntry("late")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the late tenant's entry is on disk after shutdown: %v", err)
	}
}
