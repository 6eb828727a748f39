package verdict

import (
	"testing"

	"github.com/allox-os/allox/services/internal/effects/evidence"
	"github.com/allox-os/allox/services/internal/effects/scope"
)

var strict = &evidence.Recovery{ScrubRuntime: true, RequireConsistent: true}

func TestRecoveredRunNeedsNoFence(t *testing.T) {
	// The run writes effect.txt (B); the rollback removes it again (C).
	r := VerifyRecovery(closed(t, evidence.ProtocolRecovery, strict, at(scope.Workspace, "B", addItem("effect.txt", "file"))))
	if r.Evidence != Complete || r.Verdict != Consistent || !r.Verified || !r.Recovered || r.Fence {
		t.Fatalf("report = %+v, want COMPLETE, CONSISTENT, verified, recovered, no fence", r)
	}
	if len(r.Run.Effects) != 1 || len(r.Recovery.Effects) != 1 {
		t.Errorf("effects A→B %v, B→C %v: want the file added by the run and removed by the recovery", r.Run.Effects, r.Recovery.Effects)
	}
}

func TestRecoveryThatDoesNotRestoreTheWorkspaceFences(t *testing.T) {
	r := VerifyRecovery(closed(t, evidence.ProtocolRecovery, strict, at(scope.Workspace, "BC", addItem("effect.txt", "file"))))
	if !r.Verified || r.Recovered || !r.Fence || r.Verdict != Inconsistent {
		t.Fatalf("report = %+v, want verified, not recovered, fenced, INCONSISTENT", r)
	}
	onlyInconsistent(t, r.Restored, scope.Workspace)
}

// TestSystemResidueFencesWhenRequired: the run changed a sysctl; the
// rollback (rightly) did not touch it, so B→C passes but A→C does not.
func TestSystemResidueFencesWhenRequired(t *testing.T) {
	mut := at(scope.Sysctl, "BC", setValue("k1", "changed"))
	r := VerifyRecovery(closed(t, evidence.ProtocolRecovery, strict, mut))
	if !r.Verified || r.Recovered || !r.Fence || r.Verdict != Inconsistent {
		t.Fatalf("report = %+v, want verified, not recovered, fenced", r)
	}
	d := onlyInconsistent(t, r.Restored, scope.Sysctl)
	if len(d.Changes) != 1 || d.Changes[0].Key != "k1" {
		t.Errorf("A→C sysctl changes %+v, want k1", d.Changes)
	}
	if !hasProblem(r.FenceReasons, "require_consistent") {
		t.Errorf("fence reasons %q do not name require_consistent", r.FenceReasons)
	}

	lax := VerifyRecovery(closed(t, evidence.ProtocolRecovery, &evidence.Recovery{RequireConsistent: false}, mut))
	if !lax.Verified || lax.Recovered || lax.Fence || lax.Verdict != Inconsistent {
		t.Errorf("require_consistent=false: %+v, want verified, INCONSISTENT, not fenced", lax)
	}
}

func TestUnconfirmableAfterRecoveryFences(t *testing.T) {
	r := VerifyRecovery(closed(t, evidence.ProtocolRecovery, strict, at(scope.Netfilter, "C", func(s *evidence.Snapshot) {
		*s = *evidence.Unconfirmed(s.Domain, s.Point, "nftables: permission denied")
	})))
	if r.Verified || !r.Fence || r.Verdict != Inconclusive {
		t.Fatalf("report = %+v, want not verified, fenced, INCONCLUSIVE", r)
	}
}

func TestRecoveryThatChangesTheSystemFails(t *testing.T) {
	r := VerifyRecovery(closed(t, evidence.ProtocolRecovery, &evidence.Recovery{}, at(scope.Mounts, "C", addItem("/mnt/x", "fstype=tmpfs"))))
	if r.Verified || !r.Fence {
		t.Fatalf("report = %+v, want not verified and fenced even without require_consistent", r)
	}
	onlyInconsistent(t, r.Recovery, scope.Mounts)
}

func TestIncompleteRecoveryEvidenceFences(t *testing.T) {
	set := craft(t, evidence.ProtocolRecovery, strict, nil)
	r := VerifyRecovery(load(t, set.Dir()))
	if r.Evidence != Incomplete || r.Verdict != Inconclusive || r.Verified || !r.Fence {
		t.Fatalf("unclosed set: %+v, want INCOMPLETE, INCONCLUSIVE, fenced", r)
	}
}
