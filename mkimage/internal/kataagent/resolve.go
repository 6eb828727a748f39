package kataagent

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"
)

// tree is a guest root read offline.
type tree[N any] interface {
	lstat(p string) (N, error)
}

// node is what resolve needs of an entry.
type node interface {
	cpioEntry | diskEntry
}

// resolve follows symlinks in every component of p inside the image's root (absolute targets are
// relative to that root, as for the guest's kernel) and returns the final path and its entry,
// which must be a regular file.
func resolve[N node](t tree[N], p string) (string, N, error) {
	var zero N
	rest := strings.Split(strings.Trim(path.Clean(p), "/"), "/")
	cur := "/"
	for links := 0; len(rest) > 0; {
		next := path.Join(cur, rest[0])
		rest = rest[1:]
		e, err := t.lstat(next)
		if errors.Is(err, fs.ErrNotExist) {
			return next, zero, fmt.Errorf("%w: %s does not exist (looking up %s)", ErrNoAgent, next, p)
		}
		if err != nil {
			return next, zero, err
		}
		mode, link := info(e)
		if mode&fs.ModeSymlink != 0 {
			if links++; links > maxLinks {
				return next, zero, fmt.Errorf("%s: too many levels of symbolic links", p)
			}
			target := link
			if !path.IsAbs(target) {
				target = path.Join(cur, target)
			}
			rest = append(strings.Split(strings.Trim(path.Clean(target), "/"), "/"), rest...)
			cur = "/"
			continue
		}
		cur = next
		switch {
		case len(rest) > 0 && !mode.IsDir():
			return next, zero, fmt.Errorf("%s is not a directory (looking up %s)", next, p)
		case len(rest) == 0 && !mode.IsRegular():
			return next, zero, fmt.Errorf("%s resolves to %s, which is not a regular file (%v)", p, next, mode.Type())
		case len(rest) == 0:
			return cur, e, nil
		}
	}
	return cur, zero, fmt.Errorf("%s resolves to the root directory", p)
}

func info[N node](e N) (fs.FileMode, string) {
	switch e := any(e).(type) {
	case cpioEntry:
		return e.mode, e.link
	case diskEntry:
		return e.mode, e.link
	}
	panic("BUG: unknown entry type")
}
