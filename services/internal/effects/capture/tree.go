package capture

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/allox-os/allox/services/internal/effects/evidence"
)

// absent is the value of a tree root that does not exist.
const absent = "absent"

// Tree captures the tree at root, keyed by path relative to root ("." is
// root itself). A missing root is the single item ". absent".
func Tree(root string) *evidence.Snapshot {
	items, err := walk(root, func(rel string) string { return rel })
	if err != nil {
		return unconfirmed(err.Error())
	}
	return &evidence.Snapshot{Items: items}
}

// Paths captures each tree in paths, keyed by absolute path.
func Paths(paths []string) *evidence.Snapshot {
	s := &evidence.Snapshot{}
	for _, p := range paths {
		items, err := walk(p, func(rel string) string { return filepath.Join(p, rel) })
		if err != nil {
			return unconfirmed(err.Error())
		}
		s.Items = append(s.Items, items...)
	}
	return s
}

// walk describes root and everything below it. Directories are read in parallel by
// walkers (one per CPU), each entry is described relative to its directory's descriptor, and
// every directory is opened from root with symlinks refused, so an entry swapped for a symlink
// during the walk is never followed out of the tree.
func walk(root string, key func(rel string) string) ([]evidence.Item, error) {
	var st unix.Stat_t
	if err := unix.Lstat(root, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return []evidence.Item{{Key: key("."), Value: absent}}, nil
		}
		return nil, fmt.Errorf("walk %s: %w", root, &os.PathError{Op: "lstat", Path: root, Err: err})
	}
	v, err := describe(unix.AT_FDCWD, root, root, &st)
	if err != nil {
		return nil, fmt.Errorf("walk %s: %w", root, err)
	}
	items := []evidence.Item{{Key: key("."), Value: v}}
	if st.Mode&unix.S_IFMT == unix.S_IFREG {
		hashes.markUsed([]string{root})
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return items, nil
	}
	rootFd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("walk %s: %w", root, &os.PathError{Op: "open", Path: root, Err: err})
	}
	defer unix.Close(rootFd)
	w := &walker{root: root, rootFd: rootFd, key: key, queue: []string{"."}}
	w.cond = sync.NewCond(&w.mu)
	n := max(runtime.GOMAXPROCS(0), 2)
	found := make([][]evidence.Item, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { found[i] = w.work() })
	}
	wg.Wait()
	if w.err != nil {
		return nil, fmt.Errorf("walk %s: %w", root, w.err)
	}
	for _, f := range found {
		items = append(items, f...)
	}
	return items, nil
}

// walker is the shared state of one walk: a queue of directories (relative to root) to read.
type walker struct {
	root   string
	rootFd int
	key    func(rel string) string
	mu     sync.Mutex
	cond   *sync.Cond
	queue  []string
	busy   int   // walkers reading a directory
	err    error // the first error; ends the walk
}

// work reads directories from the queue until it is empty and no walker can add to it.
func (w *walker) work() []evidence.Item {
	var (
		items []evidence.Item
		files []string // regular files described, for the hash cache
	)
	for {
		w.mu.Lock()
		for len(w.queue) == 0 && w.busy > 0 && w.err == nil {
			w.cond.Wait()
		}
		if len(w.queue) == 0 || w.err != nil {
			w.cond.Broadcast()
			w.mu.Unlock()
			hashes.markUsed(files)
			return items
		}
		dir := w.queue[len(w.queue)-1]
		w.queue = w.queue[:len(w.queue)-1]
		w.busy++
		w.mu.Unlock()
		var subdirs []string
		var err error
		items, files, subdirs, err = w.readDir(dir, items, files)
		w.mu.Lock()
		w.busy--
		if err != nil && w.err == nil {
			w.err = err
		}
		w.queue = append(w.queue, subdirs...)
		w.cond.Broadcast()
		w.mu.Unlock()
	}
}

// readDir describes the entries of the directory rel, appending them to items and its regular
// files to files, and returns the subdirectories to read next.
func (w *walker) readDir(rel string, items []evidence.Item, files []string) ([]evidence.Item, []string, []string, error) {
	abs := filepath.Join(w.root, rel)
	fd := w.rootFd
	if rel != "." {
		var err error
		fd, err = unix.Openat2(w.rootFd, rel, &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC,
			Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS})
		if err != nil {
			return items, files, nil, &os.PathError{Op: "open", Path: abs, Err: err}
		}
		defer unix.Close(fd)
	}
	// A duplicate of the descriptor for reading names: os.File owns and closes it.
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return items, files, nil, &os.PathError{Op: "dup", Path: abs, Err: err}
	}
	d := os.NewFile(uintptr(dup), abs)
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return items, files, nil, err
	}
	var subdirs []string
	var st unix.Stat_t
	for _, name := range names {
		if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return items, files, nil, &os.PathError{Op: "lstat", Path: join(abs, name), Err: err}
		}
		r := name
		if rel != "." {
			r = rel + "/" + name
		}
		p := join(abs, name)
		v, err := describe(fd, name, p, &st)
		if err != nil {
			return items, files, nil, err
		}
		items = append(items, evidence.Item{Key: w.key(r), Value: v})
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			subdirs = append(subdirs, r)
		case unix.S_IFREG:
			files = append(files, p)
		}
	}
	return items, files, subdirs, nil
}

// join is filepath.Join for a clean directory and a name without a slash.
func join(dir, name string) string {
	if strings.HasSuffix(dir, "/") {
		return dir + name
	}
	return dir + "/" + name
}

// describe renders one entry, name in the directory dirFd (abs is its full path), from its lstat.
func describe(dirFd int, name, abs string, st *unix.Stat_t) (string, error) {
	b := make([]byte, 0, 128)
	own := func(b []byte) []byte {
		b = append(b, "mode="...)
		perm := strconv.FormatUint(uint64(st.Mode&07777), 8)
		b = append(b, "0000"[:4-min(len(perm), 4)]...)
		b = append(b, perm...)
		b = append(b, " uid="...)
		b = strconv.AppendUint(b, uint64(st.Uid), 10)
		b = append(b, " gid="...)
		return strconv.AppendUint(b, uint64(st.Gid), 10)
	}
	dev := func(b []byte, kind string) []byte {
		b = own(append(b, kind+" "...))
		b = append(b, " rdev="...)
		b = strconv.AppendUint(b, uint64(unix.Major(st.Rdev)), 10)
		b = append(b, ':')
		return strconv.AppendUint(b, uint64(unix.Minor(st.Rdev)), 10)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		b = own(append(b, "dir "...))
	case unix.S_IFREG:
		sum, err := hashes.sum(dirFd, name, abs, st)
		if err != nil {
			return "", err
		}
		b = own(append(b, "file "...))
		b = append(b, " size="...)
		b = strconv.AppendInt(b, st.Size, 10)
		b = append(b, " sha256="...)
		b = append(b, sum...)
	case unix.S_IFLNK:
		target, err := readlinkAt(dirFd, name)
		if err != nil {
			return "", &os.PathError{Op: "readlink", Path: abs, Err: err}
		}
		b = append(b, "symlink uid="...)
		b = strconv.AppendUint(b, uint64(st.Uid), 10)
		b = append(b, " gid="...)
		b = strconv.AppendUint(b, uint64(st.Gid), 10)
		b = append(b, " -> "...)
		b = append(b, target...)
	case unix.S_IFIFO:
		b = own(append(b, "fifo "...))
	case unix.S_IFSOCK:
		b = own(append(b, "socket "...))
	case unix.S_IFCHR:
		b = dev(b, "chardev")
	case unix.S_IFBLK:
		b = dev(b, "blockdev")
	default:
		b = own(append(b, "unknown "...))
	}
	return string(b), nil
}

func readlinkAt(dirFd int, name string) (string, error) {
	for n := 256; ; n *= 2 {
		buf := make([]byte, n)
		l, err := unix.Readlinkat(dirFd, name, buf)
		if err != nil {
			return "", err
		}
		if l < n {
			return string(buf[:l]), nil
		}
	}
}

// hashRegular hashes the regular file name in dirFd, refusing to follow a symlink that replaced
// it since the lstat.
func hashRegular(dirFd int, name, abs string) (string, error) {
	fd, err := unix.Openat(dirFd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", &os.PathError{Op: "open", Path: abs, Err: err}
	}
	f := os.NewFile(uintptr(fd), abs)
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("read %s: %w", abs, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// hashes remembers the content hash of every regular file this process has hashed, with the
// inode's identity and change time: a later capture (B, C) of an unchanged file reuses it instead
// of reading the file again. This is sound because any change of content moves the inode's ctime,
// which userspace cannot set (only a process with CAP_SYS_TIME could rewind the clock to forge
// one, and such a process can defeat any observer in the VM); Btrfs snapshots and rollbacks keep
// inode numbers and times, so a restored file matches its entry from before the run.
var hashes = newHashCache()

type hashCache struct {
	mu sync.RWMutex
	m  map[string]hashEntry
	// used holds the files the latest capture pass (All) looked up; changed is set once any
	// lookup since the cache was loaded had to read a file. The saved cache is the latest pass's
	// files, and when nothing changed and that pass used every loaded entry, it is the file
	// already on disk.
	used    map[string]bool
	loaded  int
	changed bool
}

func newHashCache() *hashCache {
	return &hashCache{m: map[string]hashEntry{}, used: map[string]bool{}}
}

type hashEntry struct {
	ino, size    uint64
	mtime, ctime unix.Timespec
	sum          string
}

// newPass starts a capture pass: the entries looked up from now on are the ones a save keeps.
func (c *hashCache) newPass() {
	c.mu.Lock()
	c.used = make(map[string]bool, len(c.used))
	c.mu.Unlock()
}

// markUsed records the files a walk looked up.
func (c *hashCache) markUsed(paths []string) {
	c.mu.Lock()
	for _, p := range paths {
		c.used[p] = true
	}
	c.mu.Unlock()
}

// sum returns the sha256 of the regular file p (name in dirFd) with lstat st. The caller records
// p as used (markUsed).
func (c *hashCache) sum(dirFd int, name, p string, st *unix.Stat_t) (string, error) {
	key := hashEntry{ino: st.Ino, size: uint64(st.Size), mtime: st.Mtim, ctime: st.Ctim}
	c.mu.RLock()
	e, ok := c.m[p]
	c.mu.RUnlock()
	if ok && e.ino == key.ino && e.size == key.size && e.mtime == key.mtime && e.ctime == key.ctime {
		return e.sum, nil
	}
	sum, err := hashRegular(dirFd, name, p)
	if err != nil {
		return "", err
	}
	key.sum = sum
	c.mu.Lock()
	c.m[p] = key
	c.changed = true
	c.mu.Unlock()
	return sum, nil
}

// The cache file has one line per file: path, inode, size, mtime and ctime (ns) and the sha256,
// tab-separated (paths with a tab or newline are not cached). It parses several times faster
// than JSON, which matters at 10,000 files.

// LoadHashCache seeds the hash cache from a file SaveHashCache wrote after an earlier run of the
// same session, so that A re-reads only files changed since (the same ctime rule applies). The
// file lives in the daemon's state, outside every workspace. A missing or unreadable file or line
// is skipped, since the cache can only save work, never decide a verdict.
func LoadHashCache(path string) {
	b, err := os.ReadFile(path)
	if err != nil {
		return
	}
	text := string(b) // the entries' paths and sums are slices of it
	hashes.mu.Lock()
	defer hashes.mu.Unlock()
	if len(hashes.m) == 0 {
		hashes.m = make(map[string]hashEntry, strings.Count(text, "\n"))
	}
	for line := range strings.SplitSeq(text, "\n") {
		p, rest, _ := strings.Cut(line, "\t")
		var n [4]int64
		ok := p != ""
		for i := range n {
			var f string
			f, rest, _ = strings.Cut(rest, "\t")
			if n[i], err = strconv.ParseInt(f, 10, 64); err != nil {
				ok = false
			}
		}
		if !ok || !isSHA256(rest) {
			continue
		}
		if _, dup := hashes.m[p]; !dup {
			hashes.loaded++
		}
		hashes.m[p] = hashEntry{ino: uint64(n[0]), size: uint64(n[1]), mtime: unix.NsecToTimespec(n[2]),
			ctime: unix.NsecToTimespec(n[3]), sum: rest}
	}
}

// isSHA256 reports whether s is a sha256 in lowercase hex.
func isSHA256(s string) bool {
	if len(s) != 2*sha256.Size {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// SaveHashCache writes the entries of the latest capture pass's files below roots, atomically,
// unless the file would be the one loaded. It is not synced: a cache lost or cut short by a crash
// only costs the next run some reading (a cut line is skipped).
func SaveHashCache(path string, roots ...string) error {
	hashes.mu.Lock()
	if !hashes.changed && len(hashes.used) == hashes.loaded {
		hashes.mu.Unlock()
		return nil
	}
	clean := make([]string, len(roots))
	for i, r := range roots {
		clean[i] = filepath.Clean(r)
	}
	paths := make([]string, 0, len(hashes.used))
	for p := range hashes.used {
		if !strings.ContainsAny(p, "\t\n") && below(p, clean) {
			paths = append(paths, p)
		}
	}
	slices.Sort(paths)
	b := make([]byte, 0, len(paths)*160)
	for _, p := range paths {
		e := hashes.m[p]
		b = append(append(b, p...), '\t')
		b = append(strconv.AppendUint(b, e.ino, 10), '\t')
		b = append(strconv.AppendUint(b, e.size, 10), '\t')
		b = append(strconv.AppendInt(b, e.mtime.Nano(), 10), '\t')
		b = append(strconv.AppendInt(b, e.ctime.Nano(), 10), '\t')
		b = append(append(b, e.sum...), '\n')
	}
	hashes.mu.Unlock()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// below reports whether the clean absolute path p is one of the clean roots or below one.
func below(p string, roots []string) bool {
	for _, r := range roots {
		if p == r || strings.HasPrefix(p, r) && len(p) > len(r) && (p[len(r)] == '/' || r == "/") {
			return true
		}
	}
	return false
}
