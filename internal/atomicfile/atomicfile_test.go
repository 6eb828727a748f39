package atomicfile

import (
	"os"
	"path/filepath"
	"testing"
)

func TestWriteReplaces(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "state.json")
	for _, content := range []string{"old", "new"} {
		if err := Write(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(p); err != nil || string(b) != content {
			t.Fatalf("after Write(%q): %q, %v", content, b, err)
		}
	}
	if st, _ := os.Stat(p); st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", st.Mode().Perm())
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("temporary files left behind: %v", ents)
	}
}

func TestWriteFailureLeavesOldContentAndNoTemporary(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "state")
	// A directory where the file should be: the rename fails.
	if err := os.Mkdir(p, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := Write(p, []byte("x"), 0o600); err == nil {
		t.Fatal("Write over a directory succeeded")
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("a failed Write left files behind: %v", ents)
	}
}

func TestRemoveTempsRemovesOnlyLeftovers(t *testing.T) {
	dir := t.TempDir()
	if err := Write(filepath.Join(dir, "index.json"), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	// What a Write killed between CreateTemp and Rename leaves.
	f, err := os.CreateTemp(dir, ".index.json.tmp-*")
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := os.WriteFile(filepath.Join(dir, "notes.tmp-1"), nil, 0o600); err != nil { // not Write's
		t.Fatal(err)
	}
	removed, err := RemoveTemps(dir)
	if err != nil || len(removed) != 1 || removed[0] != filepath.Base(f.Name()) {
		t.Errorf("RemoveTemps = %v, %v; want [%s]", removed, err, filepath.Base(f.Name()))
	}
	ents, _ := os.ReadDir(dir)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if len(names) != 2 || names[0] != "index.json" || names[1] != "notes.tmp-1" {
		t.Errorf("left: %v; want index.json and notes.tmp-1", names)
	}
}

func TestRemoveIsIdempotent(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "a.json")
	if err := Write(p, []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := Remove(p); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Lstat(p); !os.IsNotExist(err) {
		t.Errorf("%s left: %v", p, err)
	}
}
