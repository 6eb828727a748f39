package capture

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/allox-os/allox/internal/atomicfile"
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

func walk(root string, key func(rel string) string) ([]evidence.Item, error) {
	if _, err := os.Lstat(root); errors.Is(err, os.ErrNotExist) {
		return []evidence.Item{{Key: key("."), Value: absent}}, nil
	}
	var items []evidence.Item
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		v, err := describe(p)
		if err != nil {
			return err
		}
		items = append(items, evidence.Item{Key: key(rel), Value: v})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("walk %s: %w", root, err)
	}
	return items, nil
}

// describe renders one entry without following a symlink.
func describe(p string) (string, error) {
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		return "", &os.PathError{Op: "lstat", Path: p, Err: err}
	}
	own := fmt.Sprintf("mode=%04o uid=%d gid=%d", st.Mode&07777, st.Uid, st.Gid)
	switch st.Mode & syscall.S_IFMT {
	case syscall.S_IFDIR:
		return "dir " + own, nil
	case syscall.S_IFREG:
		sum, err := hashes.sum(p, &st)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("file %s size=%d sha256=%s", own, st.Size, sum), nil
	case syscall.S_IFLNK:
		target, err := os.Readlink(p)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("symlink uid=%d gid=%d -> %s", st.Uid, st.Gid, target), nil
	case syscall.S_IFIFO:
		return "fifo " + own, nil
	case syscall.S_IFSOCK:
		return "socket " + own, nil
	case syscall.S_IFCHR:
		return fmt.Sprintf("chardev %s rdev=%d:%d", own, unix.Major(st.Rdev), unix.Minor(st.Rdev)), nil
	case syscall.S_IFBLK:
		return fmt.Sprintf("blockdev %s rdev=%d:%d", own, unix.Major(st.Rdev), unix.Minor(st.Rdev)), nil
	}
	return "unknown " + own, nil
}

// hashRegular hashes a regular file, refusing to follow a symlink that
// replaced it since the lstat.
func hashRegular(p string) (string, error) {
	f, err := os.OpenFile(p, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("read %s: %w", p, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// hashes remembers the content hash of every regular file this process has hashed, with the
// inode's identity and change time: a later capture (B, C) of an unchanged file reuses it instead
// of reading the file again. This is sound because any change of content moves the inode's ctime,
// which userspace cannot set (only a process with CAP_SYS_TIME could rewind the clock to forge
// one, and such a process can defeat any observer in the VM); Btrfs snapshots and rollbacks keep
// inode numbers and times, so a restored file matches its entry from before the run.
var hashes = &hashCache{m: map[string]hashEntry{}}

type hashCache struct {
	mu sync.Mutex
	m  map[string]hashEntry
}

type hashEntry struct {
	ino, size    uint64
	mtime, ctime unix.Timespec
	sum          string
}

func (c *hashCache) sum(p string, st *unix.Stat_t) (string, error) {
	key := hashEntry{ino: st.Ino, size: uint64(st.Size), mtime: st.Mtim, ctime: st.Ctim}
	c.mu.Lock()
	e, ok := c.m[p]
	c.mu.Unlock()
	if ok && e.ino == key.ino && e.size == key.size && e.mtime == key.mtime && e.ctime == key.ctime {
		return e.sum, nil
	}
	sum, err := hashRegular(p)
	if err != nil {
		return "", err
	}
	key.sum = sum
	c.mu.Lock()
	c.m[p] = key
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
	hashes.mu.Lock()
	defer hashes.mu.Unlock()
	for line := range strings.SplitSeq(string(b), "\n") {
		f := strings.Split(line, "\t")
		if len(f) != 6 {
			continue
		}
		var n [4]int64
		ok := true
		for i := range n {
			if n[i], err = strconv.ParseInt(f[i+1], 10, 64); err != nil {
				ok = false
			}
		}
		if ok {
			hashes.m[f[0]] = hashEntry{ino: uint64(n[0]), size: uint64(n[1]), mtime: unix.NsecToTimespec(n[2]),
				ctime: unix.NsecToTimespec(n[3]), sum: f[5]}
		}
	}
}

// SaveHashCache writes the entries of the files below roots, atomically.
func SaveHashCache(path string, roots ...string) error {
	var lines []string
	hashes.mu.Lock()
	for p, e := range hashes.m {
		if strings.ContainsAny(p, "\t\n") || !below(p, roots) {
			continue
		}
		lines = append(lines, fmt.Sprintf("%s\t%d\t%d\t%d\t%d\t%s\n", p, e.ino, e.size, e.mtime.Nano(), e.ctime.Nano(), e.sum))
	}
	hashes.mu.Unlock()
	slices.Sort(lines)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return atomicfile.Write(path, []byte(strings.Join(lines, "")), 0o600)
}

func below(p string, roots []string) bool {
	for _, r := range roots {
		if rel, err := filepath.Rel(r, p); err == nil && filepath.IsLocal(rel) {
			return true
		}
	}
	return false
}
