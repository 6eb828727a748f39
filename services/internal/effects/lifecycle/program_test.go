package lifecycle

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func pinFor(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// TestProgramRunsPinnedCopy runs a pinned program from its sealed copy, and shows that changing
// the file afterwards does not change what runs, while a changed file is refused at the next load.
func TestProgramRunsPinnedCopy(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "prog")
	if err := os.WriteFile(path, []byte("#!/bin/sh\necho original\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	pinFile := filepath.Join(dir, "pins")
	if err := os.WriteFile(pinFile, []byte(pinFor(t, path)+"  "+path+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	pins, err := ReadPins(pinFile)
	if err != nil {
		t.Fatal(err)
	}
	p, err := pins.load(path)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := os.WriteFile(path, []byte("#!/bin/sh\necho tampered\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := os.ReadFile(p.Path())
	if err != nil || !strings.Contains(string(out), "original") {
		t.Fatalf("sealed copy reads %q, %v; want the original content", out, err)
	}
	if _, err := pins.load(path); !errors.Is(err, ErrPin) {
		t.Errorf("load of the tampered file = %v, want ErrPin", err)
	}
	if _, err := pins.load(filepath.Join(dir, "unpinned")); !errors.Is(err, ErrPin) {
		t.Errorf("load of an unpinned program = %v, want ErrPin", err)
	}
}

// TestProgramExecsELF runs a real ELF binary from its sealed copy.
func TestProgramExecsELF(t *testing.T) {
	bin, err := exec.LookPath("true")
	if err != nil {
		t.Fatal(err)
	}
	bin, _ = filepath.EvalSymlinks(bin)
	pins := Pins{bin: pinFor(t, bin)}
	p, err := pins.load(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := exec.Command(p.Path()).Run(); err != nil {
		t.Fatalf("exec of the sealed copy: %v", err)
	}
}

func TestReadPinsRejectsBadLines(t *testing.T) {
	f := filepath.Join(t.TempDir(), "pins")
	if err := os.WriteFile(f, []byte("abc  relative/path\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadPins(f); err == nil || !strings.Contains(err.Error(), ":1: want") {
		t.Errorf("ReadPins = %v, want a line-numbered format error", err)
	}
}

// TestCheckedProgramsRecheckAChangedFile: an unchanged file reuses its checked copy; a file
// rewritten with the pinned content is checked again and keeps the copy; a changed one is refused
// at its next use, and accepted again once restored.
func TestCheckedProgramsRecheckAChangedFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "prog")
	original := []byte("#!/bin/sh\necho original\n")
	if err := os.WriteFile(path, original, 0o755); err != nil {
		t.Fatal(err)
	}
	ps := newCheckedPrograms(Pins{path: pinFor(t, path)})
	first, err := ps.get(path)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := ps.get(path); err != nil || again != first {
		t.Fatalf("second get = %p, %v; want the same copy %p", again, err, first)
	}
	time.Sleep(10 * time.Millisecond) // a ctime tick
	if err := os.WriteFile(path, original, 0o755); err != nil {
		t.Fatal(err)
	}
	if again, err := ps.get(path); err != nil || again != first {
		t.Fatalf("get after a same-content rewrite = %p, %v; want the same copy %p", again, err, first)
	}
	if err := os.WriteFile(path, []byte("#!/bin/sh\necho tampered\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := ps.get(path); !errors.Is(err, ErrPin) {
		t.Fatalf("get of the changed file = %v, want ErrPin", err)
	}
	if err := os.WriteFile(path, original, 0o755); err != nil {
		t.Fatal(err)
	}
	if again, err := ps.get(path); err != nil || again != first {
		t.Fatalf("get after restoring = %p, %v; want the same copy %p", again, err, first)
	}
	if out, err := os.ReadFile(first.Path()); err != nil || string(out) != string(original) {
		t.Errorf("the copy reads %q, %v; want the original", out, err)
	}
}
