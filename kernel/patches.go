package kernel

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Patch is one entry of the series, in order.
type Patch struct {
	Name string // as written in the series file
	Path string
	Line int // line in the series file
}

// ReadSeries reads a quilt-style series file: one patch file name per line, relative to the series
// file's directory; '#' comments and blank lines skipped. An empty path means no patches.
func ReadSeries(series string) ([]Patch, error) {
	if series == "" {
		return nil, nil
	}
	f, err := os.Open(series)
	if err != nil {
		return nil, fmt.Errorf("read patch series: %w", err)
	}
	defer f.Close()
	var out []Patch
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name := strings.Fields(line)[0]
		p := filepath.Join(filepath.Dir(series), name)
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("%s:%d: patch %s: %w", series, n, name, err)
		}
		out = append(out, Patch{Name: name, Path: p, Line: n})
	}
	return out, sc.Err()
}

// applyPatches applies the series in order with patch -p1. A patch that does not apply fails the
// build naming it and showing what patch said.
func applyPatches(ctx context.Context, tree string, patches []Patch) error {
	for _, p := range patches {
		cmd := exec.CommandContext(ctx, "patch", "-p1", "--batch", "--forward", "--no-backup-if-mismatch", "-i", p.Path)
		cmd.Dir = tree
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("patch %s (series line %d) does not apply: %w\n%s", p.Name, p.Line, err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}
