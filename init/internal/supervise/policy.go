package supervise

import (
	"errors"
	"time"

	"github.com/allox-os/allox/internal/manifest"
)

// ErrRestartBudget says a service failed once more after its last allowed restart (MaxRestarts).
var ErrRestartBudget = errors.New("restart budget spent")

// restarts reports whether a service that ended with status runs again.
func restarts(policy string, status int) bool {
	if status == manifest.ExitOneShot {
		return false
	}
	switch policy {
	case manifest.RestartAlways:
		return true
	case manifest.RestartOnFailure:
		return status != 0
	}
	return false
}

// Backoff is the delay between restarts: Min, doubling up to Max, back to Min after a run that
// lasted longer than Reset.
type Backoff struct {
	Min, Max, Reset time.Duration
}

// DefaultBackoff is 100 ms doubling to 10 s, reset after 10 s of running.
var DefaultBackoff = Backoff{Min: 100 * time.Millisecond, Max: 10 * time.Second, Reset: 10 * time.Second}

// next returns the delay before the next start, given the previous delay and the last run time.
func (b Backoff) next(prev, ran time.Duration) time.Duration {
	if prev == 0 || ran > b.Reset {
		return b.Min
	}
	return min(prev*2, b.Max)
}
