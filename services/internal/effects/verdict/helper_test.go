package verdict

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/allox-os/allox/services/internal/effects/evidence"
	"github.com/allox-os/allox/services/internal/effects/scope"
)

// everything is a scope that selects every domain.
var everything = &scope.Scope{Paths: []string{"/etc"}, Sysctl: &scope.Keys{All: true},
	BPF: true, Mounts: true, Network: true, Modules: true, Processes: true}

// mutation edits a domain's snapshot at a point before it is written.
type mutation func(point string, s *evidence.Snapshot)

// craft writes an evidence set with the evidence package: every domain
// holds the items k1=v1 and k2=v2 at every point, then mut edits them. The
// history is empty and lost nothing. The set is returned unclosed.
func craft(t *testing.T, protocol int, rec *evidence.Recovery, mut mutation) *evidence.Set {
	t.Helper()
	h := evidence.Header{Protocol: protocol, RunID: "run-1", AgentID: "agent-a", SessionID: "session-1",
		SessionCgroup: "/sys/fs/cgroup/allox/agent-a/session-1", Workspace: "/w/current", Shared: "/w/shared",
		Scope: everything, Domains: everything.Domains(), Recovery: rec}
	if protocol == evidence.ProtocolRecovery {
		h.BaselineCheckpoint = "baseline-1"
	}
	set, err := evidence.Create(filepath.Join(t.TempDir(), "run-1"), h)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	for _, p := range h.Points() {
		for _, d := range h.Domains {
			s := &evidence.Snapshot{Domain: d, Point: p, Items: []evidence.Item{{Key: "k1", Value: "v1"}, {Key: "k2", Value: "v2"}}}
			if mut != nil {
				mut(p, s)
			}
			if err := set.WriteSnapshot(s); err != nil {
				t.Fatalf("WriteSnapshot: %v", err)
			}
		}
	}
	if err := os.WriteFile(set.Path(evidence.HistoryFile), []byte(`{"seq":1,"kind":"end"}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := set.WriteHistory(evidence.History{Events: 1}); err != nil {
		t.Fatal(err)
	}
	return set
}

// closed crafts and closes a set and loads it back.
func closed(t *testing.T, protocol int, rec *evidence.Recovery, mut mutation) *evidence.Evidence {
	t.Helper()
	set := craft(t, protocol, rec, mut)
	if err := set.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	return load(t, set.Dir())
}

func load(t *testing.T, dir string) *evidence.Evidence {
	t.Helper()
	ev, err := evidence.Load(dir)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return ev
}

// at applies f to the snapshot of domain at the given points only.
func at(domain string, points string, f func(s *evidence.Snapshot)) mutation {
	return func(point string, s *evidence.Snapshot) {
		if s.Domain == domain && strings.Contains(points, point) {
			f(s)
		}
	}
}

func setValue(key, value string) func(*evidence.Snapshot) {
	return func(s *evidence.Snapshot) {
		for i := range s.Items {
			if s.Items[i].Key == key {
				s.Items[i].Value = value
			}
		}
	}
}

func addItem(key, value string) func(*evidence.Snapshot) {
	return func(s *evidence.Snapshot) { s.Items = append(s.Items, evidence.Item{Key: key, Value: value}) }
}

// domain returns the named domain of a transition.
func domain(t *testing.T, tr Transition, name string) Domain {
	t.Helper()
	for _, d := range tr.Domains {
		if d.Domain == name {
			return d
		}
	}
	t.Fatalf("domain %s missing from %s→%s: %+v", name, tr.From, tr.To, tr.Domains)
	return Domain{}
}

// onlyInconsistent checks that exactly the named domain is INCONSISTENT.
func onlyInconsistent(t *testing.T, tr Transition, name string) Domain {
	t.Helper()
	for _, d := range tr.Domains {
		want := Consistent
		if d.Domain == name {
			want = Inconsistent
		}
		if d.Verdict != want {
			t.Errorf("%s→%s domain %s = %s (%s), want %s", tr.From, tr.To, d.Domain, d.Verdict, d.Reason, want)
		}
	}
	return domain(t, tr, name)
}

func hasProblem(problems []string, sub string) bool {
	for _, p := range problems {
		if strings.Contains(p, sub) {
			return true
		}
	}
	return false
}
