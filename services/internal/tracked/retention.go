package tracked

import (
	"os"
	"path/filepath"
	"sort"
	"time"
)

// Retention bounds the run records (status, stdout, stderr) kept per session. A zero field sets
// no bound of its kind. Live runs are never pruned, but count towards the bounds; of the ended
// runs the newest are kept while all three bounds hold. The newest run of a session is always
// kept, so that a run's record outlives its end at least until the next run ends.
type Retention struct {
	MaxRuns  int           // runs kept per session, newest first
	MaxAge   time.Duration // ended runs older than this (since they ended) are pruned
	MaxBytes int64         // bytes of records kept per session
}

// DefaultRetention is the daemon's default: the newest 200 runs of a session, none that ended
// more than 7 days ago, at most 256 MiB of records per session.
var DefaultRetention = Retention{MaxRuns: 200, MaxAge: 7 * 24 * time.Hour, MaxBytes: 256 << 20}

func (p Retention) unbounded() bool { return p.MaxRuns <= 0 && p.MaxAge <= 0 && p.MaxBytes <= 0 }

// pruneAll applies the retention policy to every session with records (at start).
func (m *Manager) pruneAll() {
	seen := map[[2]string]bool{}
	m.mu.Lock()
	for _, r := range m.runs {
		seen[[2]string{r.st.AgentID, r.st.SessionID}] = true
	}
	m.mu.Unlock()
	for k := range seen {
		m.prune(k[0], k[1])
	}
}

// prune removes the records of the session's ended runs that the retention policy no longer
// keeps (after each run ends, and at start).
func (m *Manager) prune(agentID, sessionID string) {
	p := m.cfg.Retention
	if p.unbounded() {
		return
	}
	m.pruneMu.Lock()
	defer m.pruneMu.Unlock()
	type rec struct {
		r     *run
		st    *Status
		ended bool
	}
	var list []rec
	m.mu.Lock()
	for _, r := range m.runs {
		if r.st.AgentID != agentID || r.st.SessionID != sessionID {
			continue
		}
		ended := false
		select {
		case <-r.done:
			ended = true
		default:
		}
		list = append(list, rec{r, r.st.clone(), ended})
	}
	m.mu.Unlock()
	sort.Slice(list, func(i, j int) bool { return list[i].st.RunID > list[j].st.RunID }) // newest first
	now := time.Now()
	kept, bytes := 0, int64(0)
	for _, x := range list {
		dir := runDir(&m.cfg, x.st.RunID)
		size := recordBytes(dir)
		if !x.ended || x.st.live() || kept == 0 || p.keeps(x.st, kept, bytes+size, now) {
			kept, bytes = kept+1, bytes+size
			continue
		}
		m.mu.Lock()
		delete(m.runs, x.st.RunID)
		m.mu.Unlock()
		_ = os.RemoveAll(dir)
		m.notify(EventPrune, x.st)
	}
}

// keeps reports whether an ended run is kept, with kept newer runs before it and bytes the
// records of those and of this one.
func (p Retention) keeps(st *Status, kept int, bytes int64, now time.Time) bool {
	end := st.Ended
	if end.IsZero() {
		end = st.Started
	}
	switch {
	case p.MaxRuns > 0 && kept >= p.MaxRuns:
		return false
	case p.MaxAge > 0 && now.Sub(end) > p.MaxAge:
		return false
	case p.MaxBytes > 0 && bytes > p.MaxBytes:
		return false
	}
	return true
}

// recordBytes is the size of the files of a run's record.
func recordBytes(dir string) int64 {
	var n int64
	for _, f := range []string{statusFile, "stdout", "stderr"} {
		if fi, err := os.Lstat(filepath.Join(dir, f)); err == nil {
			n += fi.Size()
		}
	}
	return n
}
