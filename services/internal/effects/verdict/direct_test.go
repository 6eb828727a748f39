package verdict

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/allox-os/allox/services/internal/effects/evidence"
	"github.com/allox-os/allox/services/internal/effects/scope"
)

func TestUnchangedSetIsConsistent(t *testing.T) {
	r := Verify(closed(t, evidence.ProtocolDirect, nil, nil))
	if r.Evidence != Complete || r.Verdict != Consistent || len(r.Problems) > 0 {
		t.Fatalf("report = %s/%s %v, want COMPLETE/CONSISTENT", r.Evidence, r.Verdict, r.Problems)
	}
	if len(r.Run.Domains) != len(everything.Domains()) {
		t.Errorf("judged %d domains, want %d", len(r.Run.Domains), len(everything.Domains()))
	}
	for _, d := range r.Run.Domains {
		if d.Verdict != Consistent || len(d.Changes) > 0 {
			t.Errorf("domain %+v, want CONSISTENT without changes", d)
		}
	}
}

// TestEachDomainNamesTheChange changes one item of one domain between A and
// B and checks that the report names that domain and item and nothing else.
func TestEachDomainNamesTheChange(t *testing.T) {
	for _, name := range everything.Domains() {
		if name == scope.Workspace || name == scope.Processes {
			continue // their own rules, tested below
		}
		t.Run(name, func(t *testing.T) {
			r := Verify(closed(t, evidence.ProtocolDirect, nil, at(name, "B", setValue("k1", "v1-changed"))))
			if r.Evidence != Complete || r.Verdict != Inconsistent {
				t.Fatalf("report = %s/%s, want COMPLETE/INCONSISTENT", r.Evidence, r.Verdict)
			}
			d := onlyInconsistent(t, r.Run, name)
			want := []Change{{Kind: Changed, Key: "k1", Before: "v1", After: "v1-changed"}}
			if diff := cmp.Diff(want, d.Changes); diff != "" {
				t.Errorf("changes (-want +got):\n%s", diff)
			}
		})
	}
}

func TestAddedAndRemovedItemsAreNamed(t *testing.T) {
	mut := at(scope.Mounts, "B", func(s *evidence.Snapshot) {
		s.Items = []evidence.Item{{Key: "k2", Value: "v2"}, {Key: "/tmp/x", Value: "fstype=tmpfs"}}
	})
	d := onlyInconsistent(t, Verify(closed(t, evidence.ProtocolDirect, nil, mut)).Run, scope.Mounts)
	want := []Change{{Kind: Added, Key: "/tmp/x", After: "fstype=tmpfs"}, {Kind: Removed, Key: "k1", Before: "v1"}}
	if diff := cmp.Diff(want, d.Changes); diff != "" {
		t.Errorf("changes (-want +got):\n%s", diff)
	}
}

func TestWorkspaceChangesAreTheRunsEffects(t *testing.T) {
	r := Verify(closed(t, evidence.ProtocolDirect, nil, at(scope.Workspace, "B", addItem("effect.txt", "file mode=0644"))))
	if r.Verdict != Consistent {
		t.Fatalf("verdict %s, want CONSISTENT: the workspace is expected to change", r.Verdict)
	}
	want := []Change{{Kind: Added, Key: "effect.txt", After: "file mode=0644"}}
	if diff := cmp.Diff(want, r.Run.Effects); diff != "" {
		t.Errorf("effects (-want +got):\n%s", diff)
	}
}

func TestSharedIsNotTheWorkspace(t *testing.T) {
	r := Verify(closed(t, evidence.ProtocolDirect, nil, at(scope.Shared, "B", addItem("notes.md", "file"))))
	if r.Verdict != Inconsistent || len(r.Run.Effects) != 0 {
		t.Fatalf("verdict %s effects %v, want INCONSISTENT and no effects: shared/ is outside rollback", r.Verdict, r.Run.Effects)
	}
	onlyInconsistent(t, r.Run, scope.Shared)
}

func TestResidualProcesses(t *testing.T) {
	exited := Verify(closed(t, evidence.ProtocolDirect, nil, at(scope.Processes, "A", addItem("pid=7 start=99", `comm="bwrap"`))))
	if exited.Verdict != Consistent {
		t.Errorf("a process that exited: verdict %s, want CONSISTENT", exited.Verdict)
	}
	left := Verify(closed(t, evidence.ProtocolDirect, nil, at(scope.Processes, "B", addItem("pid=8 start=100", `comm="sleep"`))))
	d := onlyInconsistent(t, left.Run, scope.Processes)
	if len(d.Changes) != 1 || d.Changes[0].Key != "pid=8 start=100" || d.Changes[0].Kind != Added {
		t.Errorf("changes %+v, want the sleeping process added", d.Changes)
	}
}

func TestUnconfirmableIsInconclusive(t *testing.T) {
	r := Verify(closed(t, evidence.ProtocolDirect, nil, at(scope.BPF, "B", func(s *evidence.Snapshot) {
		*s = *evidence.Unconfirmed(s.Domain, s.Point, "bpf program ids: operation not permitted")
	})))
	d := domain(t, r.Run, scope.BPF)
	if r.Evidence != Complete || r.Verdict != Inconclusive || d.Verdict != Inconclusive || d.Reason != "unconfirmable at B: bpf program ids: operation not permitted" {
		t.Fatalf("report %s/%s, bpf %+v; want INCONCLUSIVE naming the reason", r.Evidence, r.Verdict, d)
	}
}

// TestIncompleteEvidence damages a set in every way the verifier must
// notice and checks that it is INCOMPLETE and at best INCONCLUSIVE.
func TestIncompleteEvidence(t *testing.T) {
	for _, tc := range []struct {
		name, problem string
		damage        func(t *testing.T, set *evidence.Set) // nil: close normally
		unclosed      bool
	}{
		{name: "unclosed", problem: "set not closed", unclosed: true},
		{name: "missing snapshot", problem: "B/bpf.jsonl: listed in the manifest but missing", damage: func(t *testing.T, set *evidence.Set) {
			rm(t, set.Path("B/bpf.jsonl"))
		}},
		{name: "bad hash", problem: "A/sysctl.jsonl: sha256", damage: func(t *testing.T, set *evidence.Set) {
			appendTo(t, set.Path("A/sysctl.jsonl"), " ")
		}},
		{name: "unlisted file", problem: "extra.json: present but not in the manifest", damage: func(t *testing.T, set *evidence.Set) {
			appendTo(t, set.Path("extra.json"), "{}")
		}},
		{name: "required file never written", problem: "history.jsonl: required but not in the manifest", damage: nil},
		{name: "history dropped", problem: "dropped 4 of 5 events", damage: nil},
		{name: "history unavailable", problem: "history unavailable: no BTF", damage: nil},
		{name: "observer fault", problem: "observer fault:", damage: nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			set := craft(t, evidence.ProtocolDirect, nil, nil)
			switch tc.name {
			case "required file never written":
				rm(t, set.Path(evidence.HistoryFile))
			case "history dropped":
				must(t, set.WriteHistory(evidence.History{Events: 1, Dropped: 4}))
			case "history unavailable":
				must(t, set.WriteHistory(evidence.History{Unavailable: "no BTF"}))
			case "observer fault":
				must(t, set.Fault("capture B: sysctl: permission denied"))
			}
			if !tc.unclosed {
				must(t, set.Close())
			}
			if tc.damage != nil {
				tc.damage(t, set)
			}
			r := Verify(load(t, set.Dir()))
			if r.Evidence != Incomplete || r.Verdict != Inconclusive {
				t.Errorf("report = %s/%s, want INCOMPLETE/INCONCLUSIVE", r.Evidence, r.Verdict)
			}
			if !hasProblem(r.Problems, tc.problem) {
				t.Errorf("problems %q do not name %q", r.Problems, tc.problem)
			}
		})
	}
}

func TestIncompleteNeverHidesAnInconsistency(t *testing.T) {
	set := craft(t, evidence.ProtocolDirect, nil, at(scope.Sysctl, "B", setValue("k1", "changed")))
	r := Verify(load(t, set.Dir())) // never closed
	if r.Evidence != Incomplete || r.Verdict != Inconsistent {
		t.Fatalf("report = %s/%s, want INCOMPLETE/INCONSISTENT", r.Evidence, r.Verdict)
	}
}

func TestProtocolMismatchIsIncomplete(t *testing.T) {
	r := VerifyRecovery(closed(t, evidence.ProtocolDirect, nil, nil))
	if r.Evidence != Incomplete || !r.Fence {
		t.Errorf("protocol 2 set under the recovery verifier: %s fence=%t, want INCOMPLETE and fence", r.Evidence, r.Fence)
	}
}

func rm(t *testing.T, p string) { must(t, os.Remove(p)) }

func appendTo(t *testing.T, p, s string) {
	f, err := os.OpenFile(filepath.Clean(p), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	must(t, err)
	_, err = f.WriteString(s)
	must(t, err)
	must(t, f.Close())
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestResidueOfAManagedRun: processes a managed run left in its frozen
// group were recorded (residue.jsonl) and then killed before B; they are
// residue all the same, with or without the processes domain in scope.
func TestResidueOfAManagedRun(t *testing.T) {
	residue := &evidence.Snapshot{Domain: scope.Processes, Point: evidence.PointResidue,
		Items: []evidence.Item{{Key: "pid=9 start=5", Value: `comm="sleep" exe="/bin/sleep" cgroup=.`}}}
	set := craft(t, evidence.ProtocolDirect, nil, nil)
	must(t, set.WriteResidue(residue))
	must(t, set.Close())
	r := Verify(load(t, set.Dir()))
	d := onlyInconsistent(t, r.Run, scope.Processes)
	if r.Evidence != Complete || len(d.Changes) != 1 || d.Changes[0].Key != "pid=9 start=5" {
		t.Errorf("report %s, processes %+v; want the residual sleep named", r.Evidence, d)
	}

	dir := filepath.Join(t.TempDir(), "run-2")
	minimal, err := evidence.Create(dir, evidence.Header{Protocol: 2, RunID: "run-2", AgentID: "a", SessionID: "s",
		SessionCgroup: "/cg", Workspace: "/w", Shared: "/s", Domains: (*scope.Scope)(nil).Domains()})
	must(t, err)
	for _, p := range []string{"A", "B"} {
		for _, dom := range []string{scope.Workspace, scope.Shared} {
			must(t, minimal.WriteSnapshot(&evidence.Snapshot{Domain: dom, Point: p}))
		}
	}
	must(t, os.WriteFile(minimal.Path(evidence.HistoryFile), nil, 0o600))
	must(t, minimal.WriteHistory(evidence.History{}))
	must(t, minimal.WriteResidue(residue))
	must(t, minimal.Close())
	r = Verify(load(t, dir))
	if r.Verdict != Inconsistent {
		t.Fatalf("verdict %s without the processes domain in scope, want INCONSISTENT", r.Verdict)
	}
	onlyInconsistent(t, r.Run, scope.Processes)
}
