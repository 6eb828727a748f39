package fence

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestFenceSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	r, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	r.now = func() time.Time { return time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC) }
	if err := r.Check("a", "s"); err != nil {
		t.Fatalf("unfenced session: %v", err)
	}
	if err := r.Fence("a", "s", "observer died mid-run", "/state/evidence/run-1"); err != nil {
		t.Fatal(err)
	}
	again, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	err = again.Check("a", "s")
	if !errors.Is(err, ErrFenced) {
		t.Fatalf("Check after restart = %v, want ErrFenced", err)
	}
	for _, want := range []string{"a/s is fenced since 2026-01-02T03:04:05Z", "observer died mid-run", "evidence: /state/evidence/run-1", "session.unfence"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if err := again.Check("a", "other"); err != nil {
		t.Errorf("another session is fenced too: %v", err)
	}
	if was, err := again.Unfence("a", "s"); !was || err != nil {
		t.Fatalf("Unfence = %v, %v", was, err)
	}
	if was, _ := again.Unfence("a", "s"); was {
		t.Error("second Unfence reports a fence")
	}
	third, err := Open(dir)
	if err != nil || third.Check("a", "s") != nil {
		t.Errorf("unfence did not persist: %v", err)
	}
}

func TestFenceWriteFailureChangesNothing(t *testing.T) {
	dir := t.TempDir()
	r, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	// A directory where fences.json must go makes the write fail.
	if err := os.Mkdir(filepath.Join(dir, "fences.json"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := r.Fence("a", "s", "x", ""); err == nil {
		t.Fatal("Fence succeeded although its state could not be written")
	}
	if err := r.Check("a", "s"); err != nil {
		t.Errorf("a failed Fence left the session fenced in memory: %v", err)
	}
}

func TestCorruptStateIsAnError(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "fences.json"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir); err == nil {
		t.Fatal("Open accepted a corrupt fences.json")
	}
}
