package evidence

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/allox-os/allox/services/internal/effects/scope"
)

func header() Header {
	return Header{Protocol: ProtocolDirect, RunID: "r1", AgentID: "a", SessionID: "s", SessionCgroup: "/sys/fs/cgroup/allox/a/s",
		Workspace: "/w/current", Shared: "/w/shared", Domains: (*scope.Scope)(nil).Domains()}
}

func TestHeaderValidateNamesEveryField(t *testing.T) {
	err := (&Header{Protocol: 3, Domains: []string{"workspace"}}).Validate()
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("Validate = %v, want ErrInvalid", err)
	}
	for _, field := range []string{"run_id", "agent_id", "session_id", "session_cgroup", "workspace", "shared", "recovery", "baseline_checkpoint", "domains"} {
		if !strings.Contains(err.Error(), field+":") {
			t.Errorf("error %q does not name %s", err, field)
		}
	}
}

// TestRoundTrip writes a set, closes it and reads it back: the manifest
// lists every file with its hash, the snapshots come back canonical and
// the set is complete.
func TestRoundTrip(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "r1")
	set, err := Create(dir, header())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Create(dir, header()); err == nil {
		t.Error("Create over an existing set succeeded; each run needs a new directory")
	}
	for _, p := range []string{PointA, PointB} {
		for _, d := range []string{scope.Workspace, scope.Shared} {
			s := &Snapshot{Domain: d, Point: p, Items: []Item{{Key: "b", Value: "2"}, {Key: "a", Value: "1"}}}
			must(t, set.WriteSnapshot(s))
		}
		must(t, set.RecordCapture(p, time.Unix(1, 0), time.Unix(2, 0)))
	}
	if err := set.WriteSnapshot(&Snapshot{Domain: scope.BPF, Point: PointA}); err == nil {
		t.Error("a snapshot of a domain outside the header was written")
	}
	must(t, os.WriteFile(set.Path(HistoryFile), nil, 0o600))
	must(t, set.WriteHistory(History{Events: 3}))
	must(t, set.Close())
	if err := set.Close(); err == nil {
		t.Error("second Close succeeded")
	}

	var m Manifest
	b, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	must(t, err)
	must(t, json.Unmarshal(b, &m))
	var paths []string
	for _, f := range m.Files {
		paths = append(paths, f.Path)
		if len(f.SHA256) != 64 {
			t.Errorf("%s: sha256 %q", f.Path, f.SHA256)
		}
	}
	want := []string{"A/shared.jsonl", "A/workspace.jsonl", "B/shared.jsonl", "B/workspace.jsonl", FaultFile, HeaderFile, HistorySummaryFile, HistoryFile}
	if diff := cmp.Diff(want, paths); diff != "" {
		t.Errorf("manifest files (-want +got):\n%s", diff)
	}

	ev, err := Load(dir)
	must(t, err)
	if !ev.Complete() || !ev.Closed || len(ev.Header.Captures) != 2 {
		t.Fatalf("loaded set: complete=%t closed=%t captures=%v problems=%v", ev.Complete(), ev.Closed, ev.Header.Captures, ev.Problems)
	}
	if got := ev.Snapshot(PointB, scope.Shared).Items; got[0].Key != "a" || got[1].Key != "b" {
		t.Errorf("items %v not sorted by key", got)
	}
}

func TestCanonicalizeRefusesDuplicateKeys(t *testing.T) {
	s := &Snapshot{Domain: "mounts", Items: []Item{{Key: "/x", Value: "1"}, {Key: "/x", Value: "2"}}}
	if err := s.Canonicalize(); err == nil || !strings.Contains(err.Error(), "BUG") {
		t.Errorf("Canonicalize = %v, want a BUG error for the duplicate key", err)
	}
}

func TestFaultLogMakesTheSetIncomplete(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "r1")
	set, err := Create(dir, header())
	must(t, err)
	must(t, set.Fault("capture A: multi\nline"))
	ev, err := Load(dir)
	must(t, err)
	if ev.Complete() || len(ev.Faults) != 1 || !strings.HasSuffix(ev.Faults[0], "capture A: multi line") {
		t.Errorf("faults %q problems %q, want one fault line and an incomplete set", ev.Faults, ev.Problems)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestCloseVouchesForWhatWasWritten changes a snapshot file behind the set's back, keeping its
// size, before the set is closed: the manifest lists what the set wrote, so the loaded set is
// incomplete and names the file.
func TestCloseVouchesForWhatWasWritten(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "r1")
	set, err := Create(dir, header())
	must(t, err)
	for _, p := range []string{PointA, PointB} {
		for _, d := range []string{scope.Workspace, scope.Shared} {
			must(t, set.WriteSnapshot(&Snapshot{Domain: d, Point: p, Items: []Item{{Key: "f", Value: "file sha256=aaaa"}}}))
		}
	}
	must(t, os.WriteFile(set.Path(HistoryFile), nil, 0o600))
	must(t, set.WriteHistory(History{}))
	name := SnapshotFile(PointB, scope.Workspace)
	b, err := os.ReadFile(set.Path(name))
	must(t, err)
	must(t, os.WriteFile(set.Path(name), []byte(strings.Replace(string(b), "aaaa", "bbbb", 1)), 0o600))
	must(t, set.Close())
	ev, err := Load(dir)
	must(t, err)
	if ev.Complete() || !strings.Contains(strings.Join(ev.Problems, "\n"), name+": sha256") {
		t.Errorf("problems %q, want %s named as not matching the manifest", ev.Problems, name)
	}
}
