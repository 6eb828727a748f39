package evidence

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/allox-os/allox/services/internal/effects/scope"
)

// File names inside a set.
const (
	HeaderFile         = "header.json"
	HistoryFile        = "history.jsonl"
	HistorySummaryFile = "history.json"
	FaultFile          = "faults.log"
	ManifestFile       = "manifest.json"
	ResidueFile        = "residue.jsonl"        // optional: processes left behind by a managed run
	ReportFile         = "report.json"          // protocol 2 verifier output
	RecoveryReportFile = "recovery-report.json" // protocol 3 verifier output
)

// Capture points.
const (
	PointA = "A" // before the agent is released (S0)
	PointB = "B" // after the run's process tree is gone (S1)
	PointC = "C" // protocol 3: after the recovery
	// PointResidue is taken between A and B, only when a managed run's
	// main process exited leaving processes in its frozen group, before
	// the daemon kills them. Its one snapshot is the processes domain.
	PointResidue = "residue"
)

// Protocol versions.
const (
	ProtocolDirect   = 2 // A→B
	ProtocolRecovery = 3 // A→B, B→C, A→C
)

// ErrInvalid marks a header that cannot describe a set.
var ErrInvalid = errors.New("invalid evidence header")

// Header describes the run a set is about. It is written when the set is
// created and rewritten with the capture times before the set is closed.
type Header struct {
	Protocol           int          `json:"protocol"`
	RunID              string       `json:"run_id"`
	AgentID            string       `json:"agent_id"`
	SessionID          string       `json:"session_id"`
	SessionCgroup      string       `json:"session_cgroup"`
	Workspace          string       `json:"workspace"`
	Shared             string       `json:"shared"`
	BaselineCheckpoint string       `json:"baseline_checkpoint,omitempty"`
	Scope              *scope.Scope `json:"scope,omitempty"`
	Domains            []string     `json:"domains"`
	Recovery           *Recovery    `json:"recovery,omitempty"`
	Captures           []Capture    `json:"captures,omitempty"`
}

// Recovery holds the protocol 3 recovery parameters.
type Recovery struct {
	ScrubRuntime      bool `json:"scrub_runtime"`
	RequireConsistent bool `json:"require_consistent"`
}

// Capture records when a capture point was taken.
type Capture struct {
	Point    string    `json:"point"`
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
}

// Points returns the capture points of the header's protocol.
func (h *Header) Points() []string {
	if h.Protocol == ProtocolRecovery {
		return []string{PointA, PointB, PointC}
	}
	return []string{PointA, PointB}
}

// Validate checks the fields a verifier relies on and names the fix.
func (h *Header) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: %s: %s", ErrInvalid, field, fmt.Sprintf(format, args...)))
	}
	if h.Protocol != ProtocolDirect && h.Protocol != ProtocolRecovery {
		bad("protocol", "%d: use 2 (direct, A→B) or 3 (recovery, A→B→C)", h.Protocol)
	}
	for field, v := range map[string]string{"run_id": h.RunID, "agent_id": h.AgentID, "session_id": h.SessionID,
		"session_cgroup": h.SessionCgroup, "workspace": h.Workspace, "shared": h.Shared} {
		if v == "" {
			bad(field, "missing")
		}
	}
	if h.Protocol == ProtocolRecovery {
		if h.Recovery == nil {
			bad("recovery", "protocol 3 needs the recovery parameters")
		}
		if h.BaselineCheckpoint == "" {
			bad("baseline_checkpoint", "protocol 3 needs the checkpoint the recovery restores")
		}
	}
	if h.Protocol == ProtocolDirect && h.Recovery != nil {
		bad("recovery", "set only with protocol 3")
	}
	if !slices.Contains(h.Domains, scope.Workspace) || !slices.Contains(h.Domains, scope.Shared) {
		bad("domains", "%v: the workspace and shared domains are always captured", h.Domains)
	}
	for _, d := range h.Domains {
		if d == "" || strings.ContainsAny(d, "/.") {
			bad("domains", "%q is not a domain name", d)
		}
	}
	return errors.Join(errs...)
}

// SnapshotFile is the path of a domain's snapshot at a point, relative to
// the set's directory.
func SnapshotFile(point, domain string) string { return point + "/" + domain + ".jsonl" }

// RequiredFiles lists every file a closed set of this header must hold,
// except the manifest itself.
func (h *Header) RequiredFiles() []string {
	files := []string{HeaderFile, HistoryFile, HistorySummaryFile, FaultFile}
	for _, p := range h.Points() {
		for _, d := range h.Domains {
			files = append(files, SnapshotFile(p, d))
		}
	}
	slices.Sort(files)
	return files
}
