package capture

import (
	"github.com/allox-os/allox/services/internal/effects/evidence"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestTreeSeesSameSizeRewrite checks that the hash cache never hides a change: content rewritten
// with the same size and the old mtime put back is still seen (the inode's ctime moved).
func TestTreeSeesSameSizeRewrite(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "f")
	if err := os.WriteFile(f, []byte("aaaa"), 0o644); err != nil {
		t.Fatal(err)
	}
	old := time.Unix(1_000_000, 0)
	if err := os.Chtimes(f, old, old); err != nil {
		t.Fatal(err)
	}
	before := Tree(dir)
	again := Tree(dir)
	time.Sleep(10 * time.Millisecond) // a ctime tick
	if err := os.WriteFile(f, []byte("bbbb"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(f, old, old); err != nil {
		t.Fatal(err)
	}
	after := Tree(dir)
	for _, s := range []*evidence.Snapshot{before, again, after} {
		if len(s.Items) != 2 || s.Items[1].Key != "f" {
			t.Fatalf("tree items %+v, want . and f", s.Items)
		}
	}
	if before.Items[1].Value != again.Items[1].Value {
		t.Errorf("two captures of an unchanged file differ: %q vs %q", before.Items[1].Value, again.Items[1].Value)
	}
	if before.Items[1].Value == after.Items[1].Value {
		t.Errorf("a same-size rewrite with the old mtime went unseen: %q", after.Items[1].Value)
	}
}
