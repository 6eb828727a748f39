package sessionshare

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/allox-os/allox/services/internal/audit"
)

// AuditFile is the plugin's log in its audit directory; rotated files are AuditFile.1 (newest) …
const AuditFile = "share.jsonl"

// Decisions of a Record.
const (
	Allowed = "allow"
	Denied  = "deny"  // refused by the share rules or the path's safety checks
	Failed  = "error" // allowed, but the transfer failed (stream cut, I/O error)
)

// Record is one line of the share audit: one access (or refusal).
type Record struct {
	Time       time.Time `json:"time"`
	AgentID    string    `json:"agent_id"` // the caller
	SessionID  string    `json:"session_id"`
	Action     string    `json:"action"`
	Target     string    `json:"target,omitempty"` // "agent/session"
	Path       string    `json:"path,omitempty"`
	Bytes      int64     `json:"bytes"`
	Decision   string    `json:"decision"`
	Code       string    `json:"code,omitempty"`
	Reason     string    `json:"reason,omitempty"`
	DurationNS int64     `json:"duration_ns,omitempty"`
}

// maxField bounds each string of a Record.
const maxField = 1024

// auditLog appends Records with the rotation of the daemon's audit log.
type auditLog struct{ Dir string }

func (l auditLog) append(r Record) error {
	if r.Time.IsZero() {
		r.Time = time.Now().UTC()
	}
	for _, s := range []*string{&r.AgentID, &r.SessionID, &r.Target, &r.Path, &r.Reason} {
		if len(*s) > maxField { // they come from requests
			*s = (*s)[:maxField] + "…"
		}
	}
	line, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("share audit: %w", err)
	}
	return audit.Log{Dir: l.Dir, Name: AuditFile}.AppendLine(append(line, '\n'))
}

// ReadAudit returns every record kept in dir, oldest first.
func ReadAudit(dir string) ([]Record, error) {
	var out []Record
	for _, path := range audit.Files(dir, AuditFile) {
		if err := audit.ScanLines(path, func(line []byte) error {
			var r Record
			if err := json.Unmarshal(line, &r); err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			out = append(out, r)
			return nil
		}); err != nil {
			return nil, err
		}
	}
	return out, nil
}
