package scrub

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Runtime scrubs one run: it kills and removes the cgroup subtree at
// runCgroup and removes the staging directory (both may already be gone).
// ctx bounds the wait for the subtree to empty.
func Runtime(ctx context.Context, runCgroup, staging string) error {
	if err := killTree(ctx, runCgroup); err != nil {
		return fmt.Errorf("scrub run cgroup %s: %w", runCgroup, err)
	}
	if staging != "" {
		if err := os.RemoveAll(staging); err != nil {
			return fmt.Errorf("scrub run staging %s: %w", staging, err)
		}
	}
	return nil
}

func killTree(ctx context.Context, dir string) error {
	err := os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil // already removed
	}
	if err != nil {
		return fmt.Errorf("cgroup.kill: %w", err)
	}
	for populated(dir) {
		select {
		case <-ctx.Done():
			return fmt.Errorf("not empty after cgroup.kill: %w", ctx.Err())
		case <-time.After(2 * time.Millisecond):
		}
	}
	var groups []string
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			groups = append(groups, p)
		}
		return err
	})
	if err != nil {
		return err
	}
	for i := len(groups) - 1; i >= 0; i-- { // leaves first
		if err := os.Remove(groups[i]); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

func populated(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.events"))
	return err == nil && strings.Contains(string(b), "populated 1")
}
