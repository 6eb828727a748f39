package tracked

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// testObserver records what the run's cgroup looked like at each call.
type testObserver struct {
	t                    *testing.T
	dir                  func(st *Status) string
	marker               string
	beginEvents, endProc string
	endEvents            string
	quiesce              error
	beginErr             error
	begun, ended         int
	residueEvents        string
	residueProcs         string
	residues             int
}

func (o *testObserver) Residue(st *Status) error {
	o.residues++
	b, _ := os.ReadFile(filepath.Join(o.dir(st), "cgroup.events"))
	o.residueEvents = string(b)
	p, _ := os.ReadFile(filepath.Join(o.dir(st), "cgroup.procs"))
	o.residueProcs = string(p)
	return nil
}

func (o *testObserver) Begin(st *Status) (json.RawMessage, error) {
	o.begun++
	if _, err := os.Stat(o.marker); !errors.Is(err, os.ErrNotExist) {
		o.t.Errorf("the command ran before the observer's Begin: %v", err)
	}
	b, _ := os.ReadFile(filepath.Join(o.dir(st), "cgroup.events"))
	o.beginEvents = string(b)
	return nil, o.beginErr
}

func (o *testObserver) End(st *Status, quiesce error) (json.RawMessage, error) {
	o.ended++
	o.quiesce = quiesce
	if _, err := os.Stat(o.marker); err != nil {
		o.t.Errorf("End before the command's effect was visible: %v", err)
	}
	b, _ := os.ReadFile(filepath.Join(o.dir(st), "cgroup.events"))
	o.endEvents = string(b)
	p, _ := os.ReadFile(filepath.Join(o.dir(st), "cgroup.procs"))
	o.endProc = string(p)
	return json.RawMessage(`{"verdict":"CONSISTENT"}`), nil
}

// TestObserverSeesFrozenBoundaries checks the observer's two looks: before the command runs, with
// bwrap frozen in the run's group, and after the whole tree (a background child included) has
// exited, with the group empty, frozen and still there; its report lands in the run record.
func TestObserverSeesFrozenBoundaries(t *testing.T) {
	e := newEnv(t, nil)
	o := &testObserver{t: t, marker: filepath.Join(e.ws.Current, "ran"),
		dir: func(st *Status) string { return e.m.CgroupDir("a", "s1", st.RunID) }}
	req := e.req("s1", "/bin/sh", "-c", "touch ran; sleep 30 & exit 0")
	req.Hooks = []Hook{{Name: "observer", Observer: o, Frozen: true}}
	st := e.run(t, req)
	if o.begun != 1 || o.ended != 1 {
		t.Fatalf("Begin called %d times, End %d times; want once each", o.begun, o.ended)
	}
	if !strings.Contains(o.beginEvents, "populated 1") || !strings.Contains(o.beginEvents, "frozen 1") {
		t.Errorf("at Begin cgroup.events = %q, want the group populated (bwrap) and frozen", o.beginEvents)
	}
	if !strings.Contains(o.endEvents, "populated 0") || !strings.Contains(o.endEvents, "frozen 1") || o.endProc != "" {
		t.Errorf("at End cgroup.events = %q, procs %q; want the group empty and frozen", o.endEvents, o.endProc)
	}
	if o.quiesce != nil {
		t.Errorf("End told of a quiesce failure: %v", o.quiesce)
	}
	if st.State != StateExited || string(st.Meta["observer"]) != `{"verdict":"CONSISTENT"}` {
		t.Errorf("status = %+v meta %s, want exited with the observer's report", st, st.Meta)
	}
	got, err := e.m.Get(st.RunID)
	if err != nil || string(got.Meta["observer"]) != `{"verdict":"CONSISTENT"}` {
		t.Errorf("Get = %+v, %v; want the observer's report kept in the record", got, err)
	}
	if _, err := os.Stat(o.dir(st)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the frozen run group was not removed after End: %v", err)
	}
}

// TestObserverBeginFailsClosed checks that an observer that cannot take its first look fails the
// start: the command never runs and the group is gone.
func TestObserverBeginFailsClosed(t *testing.T) {
	e := newEnv(t, nil)
	boom := errors.New("capture A failed")
	o := &testObserver{t: t, marker: filepath.Join(e.ws.Current, "ran"), beginErr: boom,
		dir: func(st *Status) string { return e.m.CgroupDir("a", "s1", st.RunID) }}
	req := e.req("s1", "/bin/sh", "-c", "touch ran")
	req.Hooks = []Hook{{Name: "observer", Observer: o, Frozen: true}}
	_, err := e.m.Start(context.Background(), req)
	if !errors.Is(err, ErrSandbox) || !errors.Is(err, boom) {
		t.Fatalf("Start = %v, want ErrSandbox wrapping the observer's error", err)
	}
	if _, err := os.Stat(o.marker); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the command ran although Begin failed: %v", err)
	}
	if o.ended != 0 {
		t.Errorf("End called %d times for a run that never started", o.ended)
	}
	entries, _ := os.ReadDir(filepath.Dir(e.m.CgroupDir("a", "s1", "x")))
	for _, d := range entries {
		if d.IsDir() {
			t.Errorf("run group %s left behind", d.Name())
		}
	}
}

// TestManagedRunResidue checks the managed (unsandboxed) path: the command runs with the daemon's
// view of the system (it writes outside the workspace), its background child outlives the main
// process, and the observer sees that residue in the frozen group before it is killed; End then
// finds the group empty.
func TestManagedRunResidue(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.AllowManaged = true })
	outside := filepath.Join(e.root, "outside.txt")
	o := &testObserver{t: t, marker: filepath.Join(e.ws.Current, "ran"),
		dir: func(st *Status) string { return e.m.CgroupDir("a", "s1", st.RunID) }}
	req := e.req("s1", "/bin/sh", "-c", "touch ran; echo x > "+outside+"; echo $TMPDIR > tmpdir; setsid sleep 300 < /dev/null > /dev/null 2>&1 & exit 0")
	req.Managed, req.Hooks = true, []Hook{{Name: "observer", Observer: o, Frozen: true}}
	st := e.run(t, req)
	if st.State != StateExited || st.ExitCode != 0 {
		t.Fatalf("status = %+v, want exited 0", st)
	}
	if _, err := os.Stat(outside); err != nil {
		t.Errorf("a managed run could not write outside its workspace: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(e.ws.Current, "tmpdir")); strings.TrimSpace(string(b)) != filepath.Join(e.ws.Current, ".allox-tmp") {
		t.Errorf("TMPDIR = %q, want current/.allox-tmp", b)
	}
	if o.residues != 1 || !strings.Contains(o.residueEvents, "frozen 1") || strings.TrimSpace(o.residueProcs) == "" {
		t.Errorf("Residue called %d times with events %q procs %q; want once, the group frozen with the sleep in it",
			o.residues, o.residueEvents, o.residueProcs)
	}
	if !strings.Contains(o.endEvents, "populated 0") || o.endProc != "" {
		t.Errorf("at End cgroup.events = %q procs %q, want the residue killed", o.endEvents, o.endProc)
	}
}

// TestManagedRefusedByDefault checks that a managed run needs Config.AllowManaged.
func TestManagedRefusedByDefault(t *testing.T) {
	e := newEnv(t, nil)
	req := e.req("s1", "/bin/true")
	req.Managed = true
	_, err := e.m.Start(context.Background(), req)
	var ie *InvalidError
	if !errors.As(err, &ie) || ie.Field != "sandbox" {
		t.Fatalf("Start = %v, want an invalid sandbox error", err)
	}
}
