package verdict

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/allox-os/allox/services/internal/effects/evidence"
	"github.com/allox-os/allox/services/internal/effects/scope"
)

// TestRenameBetweenInvalidUTF8NamesInconsistent: shared/ holds f\xfe at A and f\xff from B on, two
// names that a lossy encoding would both write as "f\uFFFD". The set read back from disk has the
// rename, and the report written by Judge and read back names both names byte for byte.
func TestRenameBetweenInvalidUTF8NamesInconsistent(t *testing.T) {
	set := craft(t, evidence.ProtocolRecovery, strict, func(point string, s *evidence.Snapshot) {
		if s.Domain == scope.Shared {
			name := "f\xff"
			if point == evidence.PointA {
				name = "f\xfe"
			}
			s.Items = append(s.Items, evidence.Item{Key: name, Value: "file mode=0644 uid=0 gid=0 size=5 sha256=x"})
		}
	})
	if err := set.Close(); err != nil {
		t.Fatal(err)
	}
	written, err := Judge(set.Dir(), evidence.RecoveryReportFile, VerifyRecovery)
	if err != nil {
		t.Fatal(err)
	}
	if written.Verdict != Inconsistent || !written.Fence {
		t.Fatalf("report %+v, want INCONSISTENT and fenced", written)
	}
	want := []Change{
		{Kind: Removed, Key: "f\xfe", Before: "file mode=0644 uid=0 gid=0 size=5 sha256=x"},
		{Kind: Added, Key: "f\xff", After: "file mode=0644 uid=0 gid=0 size=5 sha256=x"},
	}
	if diff := cmp.Diff(want, onlyInconsistent(t, written.Restored, scope.Shared).Changes); diff != "" {
		t.Errorf("A→C shared changes (-want +got):\n%s", diff)
	}
	var read RecoveryReport
	readJSONFile(t, filepath.Join(set.Dir(), evidence.RecoveryReportFile), &read)
	if diff := cmp.Diff(written, read); diff != "" {
		t.Errorf("recovery-report.json read back (-written +read):\n%s", diff)
	}
}

// TestSetOfAnotherFormatRefused: a set whose header has no format (written before format 2) or a
// later one is refused by Load and so by both verifiers, never judged.
func TestSetOfAnotherFormatRefused(t *testing.T) {
	for name, edit := range map[string]func(string) string{
		"no format": func(h string) string { return strings.Replace(h, `"format":2,`, "", 1) },
		"format 3":  func(h string) string { return strings.Replace(h, `"format":2`, `"format":3`, 1) },
	} {
		t.Run(name, func(t *testing.T) {
			set := craft(t, evidence.ProtocolDirect, nil, nil)
			if err := set.Close(); err != nil {
				t.Fatal(err)
			}
			p := set.Path(evidence.HeaderFile)
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(edit(string(b))), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err = Judge(set.Dir(), evidence.ReportFile, Verify)
			if !errors.Is(err, evidence.ErrFormat) || !strings.Contains(err.Error(), "reads format 2 only") {
				t.Errorf("Judge = %v, want ErrFormat saying which format it reads", err)
			}
			if _, err := os.Stat(filepath.Join(set.Dir(), evidence.ReportFile)); !os.IsNotExist(err) {
				t.Errorf("a report was written for a set of another format: %v", err)
			}
		})
	}
}

func readJSONFile(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
