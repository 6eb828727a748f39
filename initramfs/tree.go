// Package initramfs holds the file tree that every image is built from and writes it as a newc cpio
// archive (an initramfs). The Tree is the common currency between rootfs staging, this writer and the
// disk writer: paths are absolute and clean, owners and modes are explicit, and nothing in it depends on
// the host clock or on map order.
package initramfs

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path"
	"sort"
	"strings"
)

// Entry is one file, directory, symlink, device node or fifo of a Tree.
type Entry struct {
	// Path is absolute and clean, e.g. "/usr/bin/bwrap".
	Path string
	// Mode holds the type bits (fs.ModeDir, fs.ModeSymlink, fs.ModeDevice, fs.ModeCharDevice,
	// fs.ModeNamedPipe; none for a regular file), setuid/setgid/sticky and the permission bits.
	Mode     fs.FileMode
	UID, GID int
	// Size is the length of a regular file. Add fills it in from Data or from the Source file.
	Size int64
	// Link is the target of a symlink.
	Link string
	// Source is a host file whose contents a regular file gets; Data holds them inline instead.
	Source string
	Data   []byte
	// Major and Minor number a device node.
	Major, Minor uint32
}

// IsDir reports whether e is a directory.
func (e Entry) IsDir() bool { return e.Mode.IsDir() }

// Kind names the type of e for messages: "directory", "symlink", "file", ...
func (e Entry) Kind() string { return kind(e.Mode) }

func kind(m fs.FileMode) string {
	switch {
	case m&fs.ModeDir != 0:
		return "directory"
	case m&fs.ModeSymlink != 0:
		return "symlink"
	case m&fs.ModeCharDevice != 0:
		return "character device"
	case m&fs.ModeDevice != 0:
		return "block device"
	case m&fs.ModeNamedPipe != 0:
		return "fifo"
	default:
		return "file"
	}
}

// Tree is a set of entries keyed by path. The zero value is an empty tree ready to use.
// Parent directories need not be added: Entries implies the missing ones.
type Tree struct {
	entries map[string]Entry
	// below counts, for every directory path, the explicit entries strictly beneath it.
	below map[string]int
}

// Clone returns a copy of t that can be changed without changing t; the entries' contents (Data)
// are shared, and neither tree may change them.
func (t *Tree) Clone() *Tree {
	return &Tree{entries: maps.Clone(t.entries), below: maps.Clone(t.below)}
}

// ErrExists is returned (wrapped) by Add when the path is already in the tree.
var ErrExists = errors.New("already in the tree")

// Add inserts e. It fails if e is invalid, if e.Path is already in the tree, or if an ancestor of
// e.Path is in the tree as something other than a directory.
func (t *Tree) Add(e Entry) error {
	return t.put(e, false)
}

// Set inserts e, replacing an entry at the same path. A directory that still has entries beneath it
// can only be replaced by another directory.
func (t *Tree) Set(e Entry) error {
	return t.put(e, true)
}

// AddFile adds a root-owned regular file with inline contents.
func (t *Tree) AddFile(p string, perm fs.FileMode, data []byte) error {
	if data == nil {
		data = []byte{}
	}
	return t.Add(Entry{Path: p, Mode: perm, Data: data})
}

// AddDir adds a root-owned directory.
func (t *Tree) AddDir(p string, perm fs.FileMode) error {
	return t.Add(Entry{Path: p, Mode: fs.ModeDir | perm})
}

// AddSymlink adds a root-owned symlink p pointing at target.
func (t *Tree) AddSymlink(p, target string) error {
	return t.Add(Entry{Path: p, Mode: fs.ModeSymlink | 0o777, Link: target})
}

// Overlay sets every entry that was explicitly put into other on top of t, replacing entries at the
// same paths. Directories that other only implies leave t's directories (and their modes) alone.
func (t *Tree) Overlay(other *Tree) error {
	var errs []error
	for _, p := range other.explicitPaths() {
		if err := t.Set(other.entries[p]); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Lookup returns the entry at p: an explicit one, or a directory implied by entries beneath it.
func (t *Tree) Lookup(p string) (Entry, bool) {
	if e, ok := t.entries[p]; ok {
		return e, true
	}
	if p == "/" || t.below[p] > 0 {
		return impliedDir(p), true
	}
	return Entry{}, false
}

// Len is the number of explicit entries.
func (t *Tree) Len() int { return len(t.entries) }

// Entries returns every entry sorted by path, starting with "/", with each missing parent directory
// implied as a root-owned 0755 directory.
func (t *Tree) Entries() []Entry {
	out := make([]Entry, 0, len(t.entries)+len(t.below)+1)
	if _, ok := t.entries["/"]; !ok {
		out = append(out, impliedDir("/"))
	}
	for p := range t.below {
		if _, ok := t.entries[p]; !ok && p != "/" {
			out = append(out, impliedDir(p))
		}
	}
	for _, e := range t.entries {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

func impliedDir(p string) Entry {
	return Entry{Path: p, Mode: fs.ModeDir | 0o755}
}

func (t *Tree) explicitPaths() []string {
	ps := make([]string, 0, len(t.entries))
	for p := range t.entries {
		ps = append(ps, p)
	}
	sort.Strings(ps)
	return ps
}

func (t *Tree) put(e Entry, replace bool) error {
	e, err := normalize(e)
	if err != nil {
		return err
	}
	if t.entries == nil {
		t.entries = map[string]Entry{}
		t.below = map[string]int{}
	}
	if err := t.checkAncestors(e.Path); err != nil {
		return err
	}
	old, exists := t.entries[e.Path]
	switch {
	case exists && !replace:
		return fmt.Errorf("%s: %w as a %s", e.Path, ErrExists, old.Kind())
	case !e.IsDir() && t.below[e.Path] > 0:
		return fmt.Errorf("%s: cannot be a %s: the tree has %d entries beneath it; remove them or keep it a directory",
			e.Path, e.Kind(), t.below[e.Path])
	}
	t.entries[e.Path] = e
	if !exists {
		for _, a := range ancestors(e.Path) {
			t.below[a]++
		}
	}
	return nil
}

// checkAncestors fails if an ancestor of p is an explicit non-directory.
func (t *Tree) checkAncestors(p string) error {
	for _, a := range ancestors(p) {
		anc, ok := t.entries[a]
		if !ok || anc.IsDir() {
			continue
		}
		if anc.Mode&fs.ModeSymlink != 0 {
			fix, err := t.Resolve(p)
			if err != nil {
				return fmt.Errorf("%s: %s is a symlink to %q: %w", p, a, anc.Link, err)
			}
			return fmt.Errorf("%s: %s is a symlink to %q; add %s instead (Tree.Resolve computes it)", p, a, anc.Link, fix)
		}
		return fmt.Errorf("%s: parent %s is a %s, not a directory", p, a, anc.Kind())
	}
	return nil
}

// ancestors lists the proper ancestors of a clean absolute path, "/" first.
func ancestors(p string) []string {
	if p == "/" {
		return nil
	}
	var out []string
	for d := path.Dir(p); ; d = path.Dir(d) {
		out = append(out, d)
		if d == "/" {
			break
		}
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out
}

// Resolve returns where an entry for p belongs once symlinked directories among p's parents are
// followed inside the tree (the last element is not followed). With a merged /usr, Resolve("/sbin/init")
// is "/usr/sbin/init".
func (t *Tree) Resolve(p string) (string, error) {
	if err := ValidatePath(p); err != nil {
		return "", err
	}
	for hops := 0; ; hops++ {
		if hops > 40 {
			return "", fmt.Errorf("resolve %s: too many levels of symbolic links", p)
		}
		next, followed := t.followOne(p)
		if !followed {
			return p, nil
		}
		p = next
	}
}

// followOne replaces the first symlinked ancestor of p by its target.
func (t *Tree) followOne(p string) (string, bool) {
	for _, a := range ancestors(p) {
		e, ok := t.entries[a]
		if !ok || e.Mode&fs.ModeSymlink == 0 {
			continue
		}
		target := e.Link
		if !strings.HasPrefix(target, "/") {
			target = path.Join(path.Dir(a), target)
		}
		rest := strings.TrimPrefix(p, a)
		return path.Clean("/" + target + rest), true
	}
	return p, false
}
