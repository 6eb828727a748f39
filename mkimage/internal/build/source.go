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
// fragments) from, as git names it: the tree of the tracked files as they were on disk, and the
// commit checked out. Clean says the tree is the commit's, so another clone of that commit has the
// same source; a dirty tree is still in this repository's object store (the build wrote it there),
// which is what `mkimage rebuild` reads it from.
type Source struct {
	GitTree   string `json:"git_tree"`
	GitCommit string `json:"git_commit,omitempty"`
	Clean     bool   `json:"clean"`
}

// sourceTree records the checkout at root through a scratch copy of git's index (git add -u,
// git write-tree), so the real index is never touched. Files git does not track are not part of
// it, and neither is the output directory. A root that is no git checkout has no Source (nil).
func sourceTree(ctx context.Context, root string) (*Source, error) {
	if _, err := exec.LookPath("git"); err != nil {
		return nil, nil
	}
	gitIndex, err := git(ctx, root, nil, "rev-parse", "--path-format=absolute", "--git-path", "index")
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
	if _, err := git(ctx, root, env, "add", "-u", "--", "."); err != nil {
		return nil, err
	}
	tree, err := git(ctx, root, env, "write-tree")
	if err != nil {
		return nil, err
	}
	s := &Source{GitTree: tree}
	if commit, err := git(ctx, root, nil, "rev-parse", "--verify", "-q", "HEAD^{commit}"); err == nil {
		s.GitCommit = commit
		head, err := git(ctx, root, nil, "rev-parse", "HEAD^{tree}")
		s.Clean = err == nil && head == tree
	}
	return s, nil
}

// git runs git in dir and returns its trimmed output.
func git(ctx context.Context, dir string, env []string, args ...string) (string, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir, cmd.Stdout, cmd.Stderr = dir, &stdout, &stderr
	cmd.Env = append(os.Environ(), env...)
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(stdout.String()), nil
}
