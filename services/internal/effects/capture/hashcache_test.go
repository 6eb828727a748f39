package capture

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/allox-os/allox/services/internal/effects/evidence"
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
	hashes.mu.Unlock()
	hashes = newHashCache()
	file := filepath.Join(t.TempDir(), "cache")
	Tree(dir)
	Tree(other)
	if err := SaveHashCache(file, dir); err != nil {
		t.Fatal(err)
	}
	hashes = newHashCache()
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

// TestHashCacheSaveKeepsTheLastPass saves the cache of a pass, and checks that a pass over the
// same files leaves the file alone, that a deleted file's entry goes with the next save, and
// that a line cut short by a crash is skipped on load.
func TestHashCacheSaveKeepsTheLastPass(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"a", "b", "c"} {
		if err := os.WriteFile(filepath.Join(dir, n), []byte(n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cfg := &Config{Workspace: dir, Shared: filepath.Join(dir, "missing")}
	file := filepath.Join(t.TempDir(), "cache")
	reload := func() {
		hashes = newHashCache()
		LoadHashCache(file)
	}
	inode := func() uint64 {
		var st unix.Stat_t
		if err := unix.Stat(file, &st); err != nil {
			t.Fatal(err)
		}
		return st.Ino
	}

	hashes = newHashCache()
	All(cfg, evidence.PointA)
	if err := SaveHashCache(file, dir); err != nil {
		t.Fatal(err)
	}
	reload()
	if hashes.loaded != 3 {
		t.Fatalf("loaded %d entries, want 3", hashes.loaded)
	}
	first := inode()
	All(cfg, evidence.PointA)
	All(cfg, evidence.PointB)
	if err := SaveHashCache(file, dir); err != nil {
		t.Fatal(err)
	}
	if inode() != first {
		t.Error("a pass that read no file rewrote the cache")
	}

	reload()
	if err := os.Remove(filepath.Join(dir, "b")); err != nil {
		t.Fatal(err)
	}
	All(cfg, evidence.PointA)
	if err := SaveHashCache(file, dir); err != nil {
		t.Fatal(err)
	}
	reload()
	if _, ok := hashes.m[filepath.Join(dir, "b")]; ok || hashes.loaded != 2 {
		t.Errorf("after deleting b: %d entries loaded, b still there: %t", hashes.loaded, ok)
	}

	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, b[:len(b)-10], 0o600); err != nil {
		t.Fatal(err)
	}
	reload()
	if hashes.loaded != 1 {
		t.Errorf("a cache cut short loaded %d entries, want the 1 whole line", hashes.loaded)
	}
}
