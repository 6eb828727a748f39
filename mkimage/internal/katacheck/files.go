package katacheck

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"
)

// node is what the rules need to know about one path inside the guest's root.
type node struct {
	mode fs.FileMode // type and permission bits
	link string      // a symlink's target
}

// fileTree looks paths up without following a final symlink.
type fileTree interface {
	lstat(ctx context.Context, p string) (node, error)
}

// errNotFound is returned by lstat for a path that does not exist.
var errNotFound = errors.New("no such file")

// files opens the root filesystem once: ext4 partition 1 through debugfs, or the initrd's cpio.
func (t *Target) files() (fileTree, error) {
	if t.tree != nil || t.terr != nil {
		return t.tree, t.terr
	}
	if t.imageMode() {
		t.tree, t.terr = t.imageFiles()
	} else {
		t.tree, t.terr = readCpioTree(t.Initrd)
	}
	return t.tree, t.terr
}

// imageFiles reads partition 1 with debugfs if it holds ext4 (whatever rootfs_type says).
func (t *Target) imageFiles() (fileTree, error) {
	l, err := t.readLayout()
	if err != nil {
		return nil, err
	}
	found, err := fsType(t.Image, l.fsOffset)
	if err != nil {
		return nil, err
	}
	if found != "ext4" {
		return nil, fmt.Errorf("partition 1 holds %s: only ext4 can be read offline", found)
	}
	return newDebugfsTree(t.Image, l.fsOffset)
}

// resolve follows symlinks in every component of p, as the kernel does inside the guest's root
// (absolute targets are relative to that root), and returns the final path and its node.
func resolve(ctx context.Context, tree fileTree, p string) (string, node, error) {
	const maxLinks = 40 // the kernel's MAXSYMLINKS
	rest := strings.Split(strings.Trim(path.Clean(p), "/"), "/")
	cur := "/"
	for links := 0; len(rest) > 0; {
		next := path.Join(cur, rest[0])
		rest = rest[1:]
		n, err := tree.lstat(ctx, next)
		if err != nil {
			return next, node{}, err
		}
		if n.mode&fs.ModeSymlink == 0 {
			if len(rest) > 0 && !n.mode.IsDir() {
				return next, node{}, fmt.Errorf("%s is not a directory", next)
			}
			cur = next
			if len(rest) == 0 {
				return cur, n, nil
			}
			continue
		}
		if links++; links > maxLinks {
			return next, node{}, fmt.Errorf("%s: too many levels of symbolic links", p)
		}
		target := n.link
		if !path.IsAbs(target) {
			target = path.Join(cur, target)
		}
		rest = append(strings.Split(strings.Trim(path.Clean(target), "/"), "/"), rest...)
		cur = "/"
	}
	return cur, node{mode: fs.ModeDir}, nil
}

// checkInit: /sbin/init (image) or /init (initrd) resolves to an executable regular file.
func (t *Target) checkInit(ctx context.Context) error {
	p := "/init"
	if t.imageMode() {
		p = "/sbin/init"
	}
	tree, err := t.files()
	if err != nil {
		return err
	}
	final, n, err := resolve(ctx, tree, p)
	switch {
	case errors.Is(err, errNotFound):
		return fmt.Errorf("%s does not exist (%s is missing)", p, final)
	case err != nil:
		return fmt.Errorf("%s: %w", p, err)
	case !n.mode.IsRegular():
		return fmt.Errorf("%s resolves to %s, a %s, not a regular file", p, final, kind(n.mode))
	case n.mode.Perm()&0o111 == 0:
		return fmt.Errorf("%s resolves to %s with mode %04o: not executable", p, final, n.mode.Perm())
	}
	return nil
}

// agentPath is where Kata's runtime expects the agent in the guest.
const agentPath = "/usr/bin/kata-agent"

// checkAgent: /usr/bin/kata-agent resolves to an executable regular file.
func (t *Target) checkAgent(ctx context.Context) error {
	tree, err := t.files()
	if err != nil {
		return err
	}
	final, n, err := resolve(ctx, tree, agentPath)
	switch {
	case errors.Is(err, errNotFound):
		return fmt.Errorf("%s does not exist: the image is not usable by a Kata runtime", agentPath)
	case err != nil:
		return fmt.Errorf("%s: %w", agentPath, err)
	case !n.mode.IsRegular():
		return fmt.Errorf("%s resolves to %s, a %s, not a regular file", agentPath, final, kind(n.mode))
	case n.mode.Perm()&0o111 == 0:
		return fmt.Errorf("%s resolves to %s with mode %04o: not executable", agentPath, final, n.mode.Perm())
	}
	return nil
}

// checkResolvConf: /etc/resolv.conf is a regular file itself, not a symlink.
func (t *Target) checkResolvConf(ctx context.Context) error {
	tree, err := t.files()
	if err != nil {
		return err
	}
	dir, _, err := resolve(ctx, tree, "/etc")
	var n node
	if err == nil {
		n, err = tree.lstat(ctx, path.Join(dir, "resolv.conf"))
	}
	switch {
	case errors.Is(err, errNotFound):
		return errors.New("/etc/resolv.conf does not exist")
	case err != nil:
		return err
	case n.mode&fs.ModeSymlink != 0:
		return fmt.Errorf("/etc/resolv.conf is a symlink to %q", n.link)
	case !n.mode.IsRegular():
		return fmt.Errorf("/etc/resolv.conf is a %s", kind(n.mode))
	}
	return nil
}

func kind(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return "regular file"
	case m.IsDir():
		return "directory"
	case m&fs.ModeSymlink != 0:
		return "symlink"
	case m&fs.ModeNamedPipe != 0:
		return "fifo"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeDevice != 0:
		return "device"
	}
	return "special file"
}
