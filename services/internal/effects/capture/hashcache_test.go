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

// TestHashCacheRoundTrip saves the cache of a tree, forgets it, loads it back and gets every entry
// again (only those below the roots).
func TestHashCacheRoundTrip(t *testing.T) {
	dir, other := t.TempDir(), t.TempDir()
	for _, p := range []string{filepath.Join(dir, "a"), filepath.Join(dir, "b"), filepath.Join(other, "c")} {
		if err := os.WriteFile(p, []byte(p), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	Tree(dir)
	Tree(other)
	hashes.mu.Lock()
	want := map[string]hashEntry{}
	for p, e := range hashes.m {
		if filepath.Dir(p) == dir {
			want[p] = e
		}
	}
	hashes.m = map[string]hashEntry{}
	hashes.mu.Unlock()
	file := filepath.Join(t.TempDir(), "cache")
	Tree(dir)
	Tree(other)
	if err := SaveHashCache(file, dir); err != nil {
		t.Fatal(err)
	}
	hashes.mu.Lock()
	hashes.m = map[string]hashEntry{}
	hashes.mu.Unlock()
	LoadHashCache(file)
	hashes.mu.Lock()
	defer hashes.mu.Unlock()
	if len(hashes.m) != 2 {
		t.Fatalf("loaded %d entries, want the 2 below %s", len(hashes.m), dir)
	}
	for p, e := range want {
		if hashes.m[p] != e {
			t.Errorf("entry %s = %+v, want %+v", p, hashes.m[p], e)
		}
	}
}
