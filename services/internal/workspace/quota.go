package workspace

import (
	"fmt"

	"github.com/allox-os/allox/internal/limit"
)

// MinQuota is the smallest session quota session.create accepts: a session's metadata alone (its
// subvolumes' trees) takes some of it.
const MinQuota = 1 << 20

// Quota are the sessions' space limits (Btrfs simple quotas, enforced by the store): the image's
// default, overridable per session at creation up to the image's maximum.
type Quota struct {
	// Session is every session's quota (0: none); MaxSession bounds session.create's quota (0: the
	// default bounds it, or nothing when there is no default).
	Session, MaxSession int64
}

// bound is the largest quota session.create may ask for; 0: any.
func (q *Quota) bound() int64 {
	if q.MaxSession > 0 {
		return q.MaxSession
	}
	return q.Session
}

// check refuses a session quota out of bounds, naming params.quota.
func (q *Quota) check(bytes int64) error {
	switch {
	case bytes == 0:
		return nil
	case q == nil:
		return &LimitError{Field: "quota", Reason: "this daemon applies no space quotas; leave quota out (or set session_quota in the image spec's sandbox block)"}
	case bytes < MinQuota:
		return &LimitError{Field: "quota", Reason: fmt.Sprintf("%d bytes is below the smallest quota, %s; ask for more (sizes in bytes)", bytes, limit.FormatSize(MinQuota))}
	case q.bound() > 0 && bytes > q.bound():
		return &LimitError{Field: "quota", Reason: fmt.Sprintf("%d bytes is above the image's maximum, %d (%s); ask for less, or raise max_session_quota in the image spec's sandbox block",
			bytes, q.bound(), limit.FormatSize(q.bound()))}
	}
	return nil
}
