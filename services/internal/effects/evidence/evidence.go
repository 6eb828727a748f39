package evidence

import (
	"encoding/json"
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

// Format is the version of the set's files this package writes and reads: header.json and every
// snapshot's first line carry it. Format 2 encodes every byte string one-to-one (jsonbytes); the
// sets written before it, without a format, encoded invalid UTF-8 lossily and are not read.
const Format = 2

var (
	// ErrInvalid marks a header that cannot describe a set.
	ErrInvalid = errors.New("invalid evidence header")
	// ErrFormat marks a set or file written in another format than Format.
	ErrFormat = errors.New("evidence format not readable")
)

// checkFormat refuses a JSON object (header.json, a snapshot's first line) whose format is not
// Format. An object that does not decode at all is left to the strict decoder's error.
func checkFormat(b []byte) error {
	var v struct {
		Format *int `json:"format"`
	}
	if json.Unmarshal(b, &v) != nil {
		return nil
	}
	switch {
	case v.Format == nil:
		return fmt.Errorf("%w: no format (written before format %d, which encodes byte strings one-to-one); this reader reads format %d only: observe the run again", ErrFormat, Format, Format)
	case *v.Format != Format:
		return fmt.Errorf("%w: format %d; this reader reads format %d only", ErrFormat, *v.Format, Format)
	}
	return nil
}

// Header describes the run a set is about. It is written when the set is
// created and rewritten with the capture times before the set is closed.
type Header struct {
	Format             int          `json:"format"` // always Format
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
	if h.Format != Format {
		bad("format", "%d: this package writes and reads format %d only", h.Format, Format)
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
