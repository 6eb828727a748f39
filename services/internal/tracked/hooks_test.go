package tracked

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// orderHook records, in a log shared by several hooks, when each was called and what it saw.
type orderHook struct {
	name     string
	log      *[]string
	marker   string // must not exist at Begin
	beginErr error
	pid      int
	frozen   bool // the group was frozen at Begin
	t        *testing.T
}

func (h *orderHook) Begin(st *Status) (json.RawMessage, error) {
	events, _ := os.ReadFile(filepath.Join(st.Cgroup, "cgroup.events"))
	h.frozen = strings.Contains(string(events), "frozen 1")
	*h.log = append(*h.log, "begin "+h.name)
	h.pid = st.Pid
	if _, err := os.Stat(h.marker); !errors.Is(err, os.ErrNotExist) {
		h.t.Errorf("%s: the command ran before Begin: %v", h.name, err)
	}
	if h.beginErr != nil {
		return nil, h.beginErr
	}
	return json.RawMessage(`{"begun":"` + h.name + `"}`), nil
}

func (h *orderHook) End(st *Status, quiesce error) (json.RawMessage, error) {
	entry := "end " + h.name
	if quiesce != nil {
		entry += " (abandoned)"
	}
	*h.log = append(*h.log, entry)
	if h.name == "second" {
		return nil, nil // keeps Begin's metadata
	}
	return json.RawMessage(`{"ended":"` + h.name + `"}`), nil
}

func (h *orderHook) Residue(*Status) error { return nil }

// TestHooksInOrder checks that every hook of a run begins, in order, with bwrap's pid and before
// the command runs, ends in reverse order after it, and leaves its metadata under its name.
func TestHooksInOrder(t *testing.T) {
	e := newEnv(t, nil)
	marker := filepath.Join(e.ws.Current, "ran")
	var log []string
	first := &orderHook{name: "first", log: &log, marker: marker, t: t}
	second := &orderHook{name: "second", log: &log, marker: marker, t: t}
	req := e.req("s1", "/bin/sh", "-c", "touch ran; exit 5")
	req.Hooks = []Hook{{Name: "first", Observer: first}, {Name: "second", Observer: second}}
	st := e.run(t, req)
	if st.State != StateExited || st.ExitCode != 5 {
		t.Fatalf("status = %+v, want exited 5", st)
	}
	if first.pid != st.Pid || second.pid != st.Pid {
		t.Errorf("hooks saw pids %d and %d, want bwrap's %d", first.pid, second.pid, st.Pid)
	}
	if first.frozen || second.frozen {
		t.Errorf("the group was frozen at Begin although no hook asked (first %v, second %v)", first.frozen, second.frozen)
	}
	if diff := cmp.Diff([]string{"begin first", "begin second", "end second", "end first"}, log); diff != "" {
		t.Errorf("hook calls (-want +got):\n%s", diff)
	}
	want := map[string]string{"first": `{"ended":"first"}`, "second": `{"begun":"second"}`}
	got := map[string]string{}
	for k, v := range st.Meta {
		got[k] = string(v)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("run metadata (-want +got):\n%s", diff)
	}
	// One hook that asks: both see the group frozen.
	log = nil
	if err := os.Remove(marker); err != nil {
		t.Fatal(err)
	}
	req = e.req("s1", "/bin/true")
	req.Hooks = []Hook{{Name: "first", Observer: first}, {Name: "second", Observer: second, Frozen: true}}
	e.run(t, req)
	if !first.frozen || !second.frozen {
		t.Errorf("with one hook asking, the group was not frozen at Begin (first %v, second %v)", first.frozen, second.frozen)
	}
}

// TestHookBeginFailsClosed checks that a hook that fails its first look kills the run before its
// command runs, fails the start, and that the hooks that had begun see the run end.
func TestHookBeginFailsClosed(t *testing.T) {
	e := newEnv(t, nil)
	marker := filepath.Join(e.ws.Current, "ran")
	boom := errors.New("collector gone")
	var log []string
	first := &orderHook{name: "first", log: &log, marker: marker, t: t}
	second := &orderHook{name: "second", log: &log, marker: marker, beginErr: boom, t: t}
	third := &orderHook{name: "third", log: &log, marker: marker, t: t}
	req := e.req("s1", "/bin/sh", "-c", "touch ran")
	req.Hooks = []Hook{{Name: "first", Observer: first}, {Name: "second", Observer: second}, {Name: "third", Observer: third}}
	_, err := e.m.Start(context.Background(), req)
	if !errors.Is(err, ErrSandbox) || !errors.Is(err, boom) || !strings.Contains(err.Error(), "second: collector gone") {
		t.Fatalf("Start = %v, want ErrSandbox wrapping the second hook's error, named", err)
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the command ran although a hook failed: %v", err)
	}
	if diff := cmp.Diff([]string{"begin first", "begin second", "end first (abandoned)"}, log); diff != "" {
		t.Errorf("hook calls (-want +got):\n%s", diff)
	}
	ents, _ := os.ReadDir(e.m.CgroupDir("a", "s1", ""))
	for _, ent := range ents {
		if ent.IsDir() {
			t.Errorf("run cgroup %s left behind", ent.Name())
		}
	}
}
