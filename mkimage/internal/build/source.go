package build

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Source is the Allox checkout a build compiled its Go binaries (and read its kernel patches and
// fragments) from, as git names it: the tree of the tracked files as they were on disk. Only the
// content is recorded (not the commit), so a rebuild from the same tree writes the same manifest.
// A tree with uncommitted changes is still in this repository's object store (the build wrote it
// there), which is where `mkimage rebuild` reads it from.
type Source struct {
	GitTree string `json:"git_tree"`
}

// sourceTree records the checkout at root through a scratch copy of git's index (git add -u,
// git write-tree), so the real index is never touched. Files git does not track are not part of
// it, and neither is the output directory. A root that is no git checkout has no Source (nil).
func sourceTree(ctx context.Context, root string) (*Source, error) {
	if _, err := exec.LookPath("git"); err != nil {
		return nil, nil
	}
	gitIndex, err := Git(ctx, root, nil, "rev-parse", "--path-format=absolute", "--git-path", "index")
	if err != nil {
		return nil, nil // not a checkout: a source tarball
	}
	tmp, err := os.MkdirTemp("", "mkimage-index-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	index := filepath.Join(tmp, "index")
	if data, err := os.ReadFile(gitIndex); err == nil { // its stat cache spares rehashing every file
		if err := os.WriteFile(index, data, 0o600); err != nil {
			return nil, err
		}
	}
	env := []string{"GIT_INDEX_FILE=" + index}
	if _, err := Git(ctx, root, env, "add", "-u", "--", "."); err != nil {
		return nil, err
	}
	tree, err := Git(ctx, root, env, "write-tree")
	if err != nil {
		return nil, err
	}
	return &Source{GitTree: tree}, nil
}

// HeadCommit is the commit checked out at root when its tree is tree (the checkout is clean), so
// another clone of that commit has the same source; "" otherwise.
func HeadCommit(ctx context.Context, root, tree string) string {
	head, err := Git(ctx, root, nil, "rev-parse", "--verify", "-q", "HEAD^{tree}")
	if err != nil || head != tree {
		return ""
	}
	commit, err := Git(ctx, root, nil, "rev-parse", "HEAD^{commit}")
	if err != nil {
		return ""
	}
	return commit
}

// Git runs git in dir (with env added) and returns its trimmed output; an error carries git's.
func Git(ctx context.Context, dir string, env []string, args ...string) (string, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir, cmd.Stdout, cmd.Stderr = dir, &stdout, &stderr
	cmd.Env = append(os.Environ(), env...)
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(stdout.String()), nil
}

// Toolchain records the version of every tool of the build on this machine, as the manifest's
// toolchain does: what `mkimage rebuild` compares with the provenance's.
func Toolchain(ctx context.Context) ([]Tool, error) {
	return toolchainBy(func(argv []string) (string, error) { return toolVersion(ctx, argv) })
}
