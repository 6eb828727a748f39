package tracked

import (
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestRetentionKeeps(t *testing.T) {
	now := time.Date(2025, 1, 8, 0, 0, 0, 0, time.UTC)
	p := Retention{MaxRuns: 3, MaxAge: 24 * time.Hour, MaxBytes: 1000}
	recent := &Status{Ended: now.Add(-time.Hour)}
	for _, tt := range []struct {
		name  string
		st    *Status
		kept  int
		bytes int64
		want  bool
	}{
		{"within every bound", recent, 2, 1000, true},
		{"count reached", recent, 3, 10, false},
		{"too old", &Status{Ended: now.Add(-25 * time.Hour)}, 0, 10, false},
		{"no end time: its start counts", &Status{Started: now.Add(-25 * time.Hour)}, 0, 10, false},
		{"bytes exceeded", recent, 1, 1001, false},
	} {
		if got := p.keeps(tt.st, tt.kept, tt.bytes, now); got != tt.want {
			t.Errorf("%s: keeps = %v, want %v", tt.name, got, tt.want)
		}
	}
	if !(Retention{}).unbounded() || DefaultRetention.unbounded() {
		t.Error("the zero Retention must keep everything and the default must not")
	}
}

// TestRetentionPrunes runs real sandboxed runs under a policy of 2 runs per session: the oldest
// records go after each run ends (files and all), other sessions and live runs are untouched, a
// restart prunes by age, and every pruned record is notified.
func TestRetentionPrunes(t *testing.T) {
	var mu sync.Mutex
	var pruned []string
	notify := func(ev string, st *Status) {
		if ev == EventPrune {
			mu.Lock()
			pruned = append(pruned, st.RunID)
			mu.Unlock()
		}
	}
	e := newEnv(t, func(c *Config) { c.Retention = Retention{MaxRuns: 2}; c.Notify = notify })
	other := e.run(t, e.req("s2", "/bin/true"))
	var ids []string
	for range 4 {
		ids = append(ids, e.run(t, e.req("s1", "/bin/echo", "hi")).RunID)
	}
	list, _ := e.m.List("a", "s1")
	var got []string
	for _, st := range list {
		got = append(got, st.RunID)
	}
	if diff := cmp.Diff(ids[2:], got); diff != "" {
		t.Errorf("runs kept (-want +got):\n%s", diff)
	}
	for i, id := range ids {
		_, err := os.Stat(filepath.Join(e.records, id))
		if gone := os.IsNotExist(err); gone != (i < 2) {
			t.Errorf("run %d (%s): record dir gone = %v, want %v", i, id, gone, i < 2)
		}
	}
	mu.Lock()
	if diff := cmp.Diff(ids[:2], slices.Sorted(slices.Values(pruned))); diff != "" {
		t.Errorf("pruned runs notified (-want +got):\n%s", diff)
	}
	mu.Unlock()
	if _, err := e.m.Get(other.RunID); err != nil {
		t.Errorf("another session's run was pruned: %v", err)
	}

	// A restart with an age bound prunes what ended too long ago, but keeps each session's newest.
	cfg := e.cfg
	cfg.Retention = Retention{MaxAge: time.Nanosecond}
	m2, err := NewManager(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if list, _ := m2.List("a", "s1"); len(list) != 1 || list[0].RunID != ids[3] {
		t.Errorf("after a restart with MaxAge 1ns: %d runs kept, want only the newest %s", len(list), ids[3])
	}
	if _, err := m2.Get(other.RunID); err != nil {
		t.Errorf("the newest run of s2 was pruned at start: %v", err)
	}
}

// TestOutputDropped: the bytes beyond MaxOutputBytes are counted, live and in the final record.
func TestOutputDropped(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.MaxOutputBytes = 1000 })
	st := e.run(t, e.req("s1", "/bin/sh", "-c", "head -c 1500 /dev/zero; head -c 10 /dev/zero >&2"))
	if st.StdoutDropped != 500 || st.StderrDropped != 0 {
		t.Errorf("dropped = %d/%d, want 500/0", st.StdoutDropped, st.StderrDropped)
	}
	if n, err := e.m.Dropped(st.RunID, "stdout"); n != 500 || err != nil {
		t.Errorf("Dropped(stdout) = %d, %v; want 500", n, err)
	}
	if _, err := e.m.Dropped(st.RunID, "stdlog"); err == nil {
		t.Error("Dropped accepts a bad stream")
	}
}
