// Package audit is the Gateway's metadata-only audit trail: who did what to which object, why,
// under which approval and trace, and what recovery followed. It never holds workspace content,
// process output or secrets; only these fields exist.
package audit

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"
)

// Record is one audit entry.
type Record struct {
	Key      string    `json:"key"`
	At       time.Time `json:"at"`
	Actor    string    `json:"actor"`  // "admin:<cn>", "probe:<host>", "gateway:<replica>"
	Action   string    `json:"action"` // apply, place, reassign, intent, register, fence, escalation...
	Object   string    `json:"object"` // devbox/<name>, host/<name>, session/<devbox>/<name>
	Reason   string    `json:"reason,omitempty"`
	Approval string    `json:"approval,omitempty"` // approval reference, when one was needed
	TraceID  string    `json:"trace_id,omitempty"`
	Epoch    int64     `json:"epoch,omitempty"`
	Host     string    `json:"host,omitempty"`
}

// Prefix is where records live in the store.
const Prefix = "/allox/audit/"

// NewKey returns a store key that sorts by time (then by a random suffix among equal times).
func NewKey(at time.Time) string {
	var b [4]byte
	rand.Read(b[:])
	return fmt.Sprintf("%s%020d-%s", Prefix, at.UnixNano(), hex.EncodeToString(b[:]))
}
