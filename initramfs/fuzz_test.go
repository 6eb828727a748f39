package initramfs

import (
	"bytes"
	"io"
	"io/fs"
	"path"
	"strings"
	"testing"

	"github.com/cavaliergopher/cpio"
)

// FuzzTreeAdd checks that Add only accepts absolute clean paths without "..", "." or NUL, never
// through a symlink, and that whatever it accepts comes out of Entries and Write well formed.
func FuzzTreeAdd(f *testing.F) {
	for _, s := range []string{"/", "/etc/passwd", "etc", "/a/../b", "/..", "..", "/a//b", "/a/./b", "/a/",
		"/a\x00b", "", "/bin/sh", "/bin", "/usr/bin/x", "/ü/ñ", "//"} {
		f.Add(s, false)
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, p string, dir bool) {
		tr := &Tree{}
		must(t, tr.AddSymlink("/bin", "usr/bin"))
		e := Entry{Path: p, Mode: 0o644, Data: []byte(p)}
		if dir {
			e = Entry{Path: p, Mode: fs.ModeDir | 0o755}
		}
		if err := tr.Add(e); err != nil {
			return
		}
		switch {
		case !strings.HasPrefix(p, "/"), strings.IndexByte(p, 0) >= 0, path.Clean(p) != p:
			t.Fatalf("Add accepted %q", p)
		case strings.HasPrefix(p, "/bin/"):
			t.Fatalf("Add accepted %q beneath the symlink /bin", p)
		}
		for _, el := range strings.Split(p, "/") {
			if el == ".." || el == "." {
				t.Fatalf("Add accepted %q with element %q", p, el)
			}
		}
		entries := tr.Entries()
		seen := map[string]bool{}
		for i, en := range entries {
			if i > 0 && entries[i-1].Path >= en.Path {
				t.Fatalf("Entries not sorted and unique at %d: %q then %q", i, entries[i-1].Path, en.Path)
			}
			if en.Path != "/" && !seen[path.Dir(en.Path)] {
				t.Fatalf("%q comes before its parent", en.Path)
			}
			seen[en.Path] = true
		}
		var buf bytes.Buffer
		if err := Write(&buf, tr, epoch); err != nil {
			t.Fatal(err)
		}
		r := cpio.NewReader(&buf)
		for _, en := range entries {
			h, err := r.Next()
			if err != nil || h.Name != cpioName(en.Path) {
				t.Fatalf("read back %q: %+v, %v", en.Path, h, err)
			}
		}
		if _, err := r.Next(); err != io.EOF {
			t.Fatalf("no trailer after the last entry: %v", err)
		}
	})
}
