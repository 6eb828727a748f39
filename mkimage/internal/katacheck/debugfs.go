package katacheck

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
)

// debugfsTree reads an ext4 filesystem inside an image file with e2fsprogs' debugfs, which opens
// "IMAGE?offset=N" read-only (no loop device, no root). go-diskfs's ext4 reader is not used: its
// ReadLink fails ("invalid argument") on the fast symlinks every Debian root has (/sbin → usr/sbin).
type debugfsTree struct {
	device string // IMAGE?offset=N
}

func newDebugfsTree(image string, offset int64) (*debugfsTree, error) {
	if _, err := exec.LookPath("debugfs"); err != nil {
		return nil, fmt.Errorf("debugfs not found: apt-get install e2fsprogs")
	}
	return &debugfsTree{device: fmt.Sprintf("%s?offset=%d", image, offset)}, nil
}

var (
	statTypeRE = regexp.MustCompile(`Type: (\S+)\s+Mode:\s+([0-7]+)`)
	fastLinkRE = regexp.MustCompile(`Fast link dest: "(.*)"`)
)

func (d *debugfsTree) lstat(ctx context.Context, p string) (node, error) {
	out, err := d.run(ctx, "stat "+quote(p))
	if err != nil {
		return node{}, err
	}
	if bytes.Contains(out, []byte("File not found by ext2_lookup")) {
		return node{}, fmt.Errorf("%s: %w", p, errNotFound)
	}
	m := statTypeRE.FindSubmatch(out)
	if m == nil {
		return node{}, fmt.Errorf("debugfs stat %s: unexpected output %q", p, firstLine(out))
	}
	perm, _ := strconv.ParseUint(string(m[2]), 8, 32)
	n := node{mode: fs.FileMode(perm & 0o777)}
	switch string(m[1]) {
	case "regular":
	case "directory":
		n.mode |= fs.ModeDir
	case "symlink":
		n.mode |= fs.ModeSymlink
		if l := fastLinkRE.FindSubmatch(out); l != nil {
			n.link = string(l[1])
		} else if n.link, err = d.slowLink(ctx, p); err != nil {
			return node{}, err
		}
	default:
		n.mode |= fs.ModeIrregular
	}
	return n, nil
}

// slowLink reads a symlink whose target is kept in a data block.
func (d *debugfsTree) slowLink(ctx context.Context, p string) (string, error) {
	out, err := d.run(ctx, "cat "+quote(p))
	if err != nil {
		return "", err
	}
	return string(bytes.TrimRight(out, "\x00")), nil
}

func (d *debugfsTree) run(ctx context.Context, request string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "debugfs", "-R", request, d.device)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("debugfs -R %q %s: %w: %s", request, d.device, err, firstLine(stderr.Bytes()))
	}
	if bytes.Contains(stderr.Bytes(), []byte("Bad magic number")) || bytes.Contains(stderr.Bytes(), []byte("Couldn't find valid filesystem")) {
		return nil, fmt.Errorf("debugfs %s: no ext4 filesystem there: %s", d.device, firstLine(stderr.Bytes()))
	}
	return append(stdout.Bytes(), stderr.Bytes()...), nil
}

func quote(p string) string { return `"` + strings.ReplaceAll(p, `"`, `\"`) + `"` }

func firstLine(b []byte) string {
	s := strings.TrimSpace(string(b))
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}
