package audit

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestAppendRead(t *testing.T) {
	dir := t.TempDir()
	l := Log{Dir: dir}
	want := []Entry{
		{Action: "session.fence", AgentID: "a", SessionID: "s", Origin: Loopback, Outcome: OK, Detail: "reason"},
		{Action: "checkpoint.delete", AgentID: "a", SessionID: "s", CheckpointID: "c", Origin: Host, Outcome: "conflict", Error: "fenced"},
		{Action: "process.exit", RunID: "r1", Origin: Daemon, Outcome: OK, Detail: "exited 0"},
	}
	for _, e := range want {
		if err := l.Append(e); err != nil {
			t.Fatal(err)
		}
	}
	got, err := Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(Entry{}, "Time")); diff != "" {
		t.Errorf("read back (-want +got):\n%s", diff)
	}
	for _, e := range got {
		if e.Time.IsZero() {
			t.Errorf("entry without a time: %+v", e)
		}
	}
	fi, err := os.Stat(filepath.Join(dir, File))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("log file: %v %v, want mode 0600", fi, err)
	}
}

// TestRotation appends from independent Log values in parallel (as the store and the RPC layer
// do) and checks that the log stays within its bound, keeps the newest lines and loses none of
// those it keeps.
func TestRotation(t *testing.T) {
	dir := t.TempDir()
	const writers, each = 4, 200
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := Log{Dir: dir, MaxBytes: 4096, Keep: 3}
			for i := range each {
				if err := l.Append(Entry{Action: "x", RunID: fmt.Sprintf("w%d-%04d", w, i), Origin: Daemon, Outcome: OK}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	ents, _ := os.ReadDir(dir)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
		fi, _ := e.Info()
		if fi.Size() > 4096 {
			t.Errorf("%s is %d bytes, beyond the 4096 it rotates at", e.Name(), fi.Size())
		}
	}
	if diff := cmp.Diff([]string{File, File + ".1", File + ".2", File + ".3"}, names); diff != "" {
		t.Errorf("files (-want +got):\n%s", diff)
	}
	got, err := Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	last := map[string]int{}
	for _, e := range got {
		w, i, _ := strings.Cut(e.RunID, "-")
		n, _ := strconv.Atoi(i)
		if prev, ok := last[w]; ok && n != prev+1 {
			t.Errorf("writer %s: line %d follows %d: a kept line was lost or reordered", w, n, prev)
		}
		last[w] = n
	}
	// What is kept is the newest part of the log: a writer whose lines are kept at all has its
	// last line kept.
	if len(last) == 0 {
		t.Fatal("nothing kept")
	}
	for w, n := range last {
		if n != each-1 {
			t.Errorf("writer %s: the newest line kept is %d, want %d", w, n, each-1)
		}
	}
}

func TestClip(t *testing.T) {
	dir := t.TempDir()
	if err := (Log{Dir: dir}).Append(Entry{Action: "a", AgentID: strings.Repeat("x", 1<<20), Origin: Loopback, Outcome: "invalid_params"}); err != nil {
		t.Fatal(err)
	}
	got, err := Read(dir)
	if err != nil || len(got) != 1 || len(got[0].AgentID) > maxField+len("…") {
		t.Errorf("a 1 MiB id is not clipped: %d bytes, %v", len(got[0].AgentID), err)
	}
}
