package daemon_test

import (
	"encoding/json"
	"os"
	"sync"
	"testing"

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
