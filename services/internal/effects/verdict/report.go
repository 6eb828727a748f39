package verdict

import (
	"encoding/json"
	"path/filepath"

	"github.com/allox-os/allox/internal/atomicfile"
	"github.com/allox-os/allox/services/internal/effects/evidence"
)

// Report is the protocol 2 verifier's report (report.json).
type Report struct {
	Protocol  int        `json:"protocol"`
	RunID     string     `json:"run_id,omitempty"`
	AgentID   string     `json:"agent_id,omitempty"`
	SessionID string     `json:"session_id,omitempty"`
	Evidence  string     `json:"evidence"`
	Problems  []string   `json:"problems,omitempty"`
	Verdict   string     `json:"verdict"`
	Run       Transition `json:"run"` // A→B; the workspace changes are the run's effects
}

// RecoveryReport is the protocol 3 verifier's report (recovery-report.json).
type RecoveryReport struct {
	Protocol          int        `json:"protocol"`
	RunID             string     `json:"run_id,omitempty"`
	AgentID           string     `json:"agent_id,omitempty"`
	SessionID         string     `json:"session_id,omitempty"`
	Evidence          string     `json:"evidence"`
	Problems          []string   `json:"problems,omitempty"`
	Verdict           string     `json:"verdict"`  // worst of Recovery and Restored, capped by the evidence
	Run               Transition `json:"run"`      // A→B: the run's effects
	Recovery          Transition `json:"recovery"` // B→C: only the workspace may change
	Restored          Transition `json:"restored"` // A→C: everything equals A
	Verified          bool       `json:"verified"` // evidence COMPLETE and Recovery CONSISTENT
	Recovered         bool       `json:"recovered"`
	RequireConsistent bool       `json:"require_consistent"`
	Fence             bool       `json:"fence"`
	FenceReasons      []string   `json:"fence_reasons,omitempty"`
}

// Verify judges a protocol 2 set (A→B).
func Verify(ev *evidence.Evidence) Report {
	r := Report{Protocol: evidence.ProtocolDirect, Evidence: evidenceState(ev), Problems: ev.Problems}
	if h := ev.Header; h != nil {
		r.Protocol, r.RunID, r.AgentID, r.SessionID = h.Protocol, h.RunID, h.AgentID, h.SessionID
		if h.Protocol != evidence.ProtocolDirect {
			r.Problems = append(r.Problems, "protocol 3 set given to the protocol 2 verifier; use the recovery verifier")
			r.Evidence = Incomplete
		}
	}
	r.Run = Compare(ev, evidence.PointA, evidence.PointB, true)
	r.Verdict = capped(r.Run.Verdict, r.Evidence)
	return r
}

// VerifyRecovery judges a protocol 3 set (A→B, B→C, A→C).
func VerifyRecovery(ev *evidence.Evidence) RecoveryReport {
	r := RecoveryReport{Protocol: evidence.ProtocolRecovery, Evidence: evidenceState(ev), Problems: ev.Problems, RequireConsistent: true}
	if h := ev.Header; h != nil {
		r.Protocol, r.RunID, r.AgentID, r.SessionID = h.Protocol, h.RunID, h.AgentID, h.SessionID
		if h.Recovery != nil {
			r.RequireConsistent = h.Recovery.RequireConsistent
		}
		if h.Protocol != evidence.ProtocolRecovery {
			r.Problems = append(r.Problems, "protocol 2 set given to the recovery verifier; use the protocol 2 verifier")
			r.Evidence = Incomplete
		}
	}
	r.Run = Compare(ev, evidence.PointA, evidence.PointB, true)
	r.Recovery = Compare(ev, evidence.PointB, evidence.PointC, true)
	r.Restored = Compare(ev, evidence.PointA, evidence.PointC, false)
	r.Verdict = capped(worse(r.Recovery.Verdict, r.Restored.Verdict), r.Evidence)
	r.Verified = r.Evidence == Complete && r.Recovery.Verdict == Consistent
	r.Recovered = r.Evidence == Complete && r.Restored.Verdict == Consistent
	if r.Evidence != Complete {
		r.FenceReasons = append(r.FenceReasons, "evidence INCOMPLETE")
	}
	if r.Recovery.Verdict != Consistent {
		r.FenceReasons = append(r.FenceReasons, "recovery (B→C) changed or could not confirm a domain other than the Session Workspace: "+r.Recovery.Verdict)
	}
	if r.RequireConsistent && r.Restored.Verdict != Consistent {
		r.FenceReasons = append(r.FenceReasons, "require_consistent: A→C is "+r.Restored.Verdict)
	}
	r.Fence = len(r.FenceReasons) > 0
	return r
}

func evidenceState(ev *evidence.Evidence) string {
	if ev.Complete() {
		return Complete
	}
	return Incomplete
}

// capped never lets incomplete evidence yield better than INCONCLUSIVE.
func capped(v, state string) string {
	if state != Complete {
		return worse(v, Inconclusive)
	}
	return v
}

// Judge is the body of both verifier commands: it loads the evidence set in dir (reading nothing
// else), judges it and writes the report into the set as name, outside the manifest.
func Judge[R any](dir, name string, judge func(*evidence.Evidence) R) (R, error) {
	var r R
	ev, err := evidence.Load(dir)
	if err != nil {
		return r, err
	}
	r = judge(ev)
	b, err := json.MarshalIndent(r, "", "  ")
	if err == nil {
		err = atomicfile.Write(filepath.Join(dir, name), append(b, '\n'), 0o600)
	}
	return r, err
}
