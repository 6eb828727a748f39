package main

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/allox-os/allox/internal/artifact"
)

// rebuild times `mkimage build` with nothing changed (every cache warm), alternating with the
// least any rebuild that verifies its outputs must do: hash them.
func rebuild(ctx context.Context, w io.Writer, mkimage string, runs int) error {
	dir, err := os.MkdirTemp("", "allox-bench-out-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	build := func() error {
		_, err := mkimageBuild(ctx, mkimage, "", "", dir)
		return err
	}
	if err := build(); err != nil { // warm every cache, the Go build cache too
		return err
	}
	var ours, base []time.Duration
	for range runs {
		start := time.Now()
		if err := build(); err != nil {
			return err
		}
		ours = append(ours, time.Since(start))
		start = time.Now()
		if err := hashTree(dir); err != nil {
			return err
		}
		base = append(base, time.Since(start))
	}
	distRow(w, fmt.Sprintf("no-op mkimage build (%d runs)", runs), ours, base, "sha256 of the same outputs")
	return nil
}

// incremental times `mkimage build` after an edit of the workspace daemon's Go source (a file of
// its main package rewritten with a new value each run, so that every run compiles), in a scratch
// copy of the module with its own Go binary cache, alternating with `go build` of the same package
// after the same kind of edit: what compiling that one binary costs, the floor of any rebuild.
func incremental(ctx context.Context, stdout io.Writer, mkimage string, runs int) error {
	if runs == 0 {
		return nil
	}
	mkimage, err := filepath.Abs(mkimage)
	if err != nil {
		return err
	}
	scratch, err := os.MkdirTemp("", "allox-bench-incremental-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(scratch)
	mod, cache, out := filepath.Join(scratch, "module"), filepath.Join(scratch, "cache"), filepath.Join(scratch, "out")
	if err := copyModule(mod); err != nil {
		return err
	}
	if err := linkCache(cache); err != nil {
		return err
	}
	edit := filepath.Join(mod, "services", "workspace-daemon", "zz_bench_edit.go")
	setEdit := func(n int) error {
		src := fmt.Sprintf("package main\n\nimport \"os\"\n\nvar benchEdit = os.Getenv(\"ALLOX_BENCH_EDIT_%d\")\n", n)
		return os.WriteFile(edit, []byte(src), 0o644)
	}
	if err := setEdit(0); err != nil {
		return err
	}
	if _, err := mkimageBuild(ctx, mkimage, mod, cache, out); err != nil {
		return err
	}
	var ours, base []time.Duration
	var logs []string
	for i := range runs {
		if err := setEdit(2*i + 1); err != nil {
			return err
		}
		start := time.Now()
		log, err := mkimageBuild(ctx, mkimage, mod, cache, out)
		if err != nil {
			return err
		}
		ours, logs = append(ours, time.Since(start)), append(logs, log)
		if err := setEdit(2*i + 2); err != nil {
			return err
		}
		start = time.Now()
		cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=false", "-ldflags=-s -w -buildid=",
			"-o", filepath.Join(scratch, "daemon"), "./services/workspace-daemon")
		cmd.Dir, cmd.Env = mod, append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
		if msg, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build: %w\n%s", err, msg)
		}
		base = append(base, time.Since(start))
	}
	w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	distRow(w, fmt.Sprintf("mkimage build after editing the daemon (%d runs)", runs), ours, base, "go build of the daemon alone")
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "stages of the median incremental build:\n%s", stageLines(logs[medianIndex(ours)]))
	return nil
}

// mkimageBuild runs `mkimage build` of the default spec in dir (the checkout when ""), with cache
// ("" the default), into out, and returns what it printed.
func mkimageBuild(ctx context.Context, mkimage, dir, cache, out string) (string, error) {
	args := []string{"build", "-out", out}
	if cache != "" {
		args = append(args, "-cache", cache)
	}
	cmd := exec.CommandContext(ctx, mkimage, args...)
	cmd.Dir = dir
	msg, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s build: %w\n%s", mkimage, err, msg)
	}
	return string(msg), nil
}

// copyModule copies what the default spec builds from (the Go sources, images/ and kernel/) into dst.
func copyModule(dst string) error {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	for _, p := range []string{"go.mod", "go.sum", "init", "internal", "services", "images", "kernel"} {
		if msg, err := exec.Command("cp", "-a", p, dst).CombinedOutput(); err != nil {
			return fmt.Errorf("copy %s: %w\n%s", p, err, msg)
		}
	}
	return nil
}

// linkCache makes a cache directory holding the real cache's kernel and userland (linked) but no
// Go binaries, so that the bench's binaries stay out of the real cache.
func linkCache(dst string) error {
	src := artifact.CacheDir()
	entries, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	for _, e := range entries {
		if e.Name() != "go-binaries" {
			if err := os.Symlink(filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}

var stageLine = regexp.MustCompile(`(?m)^    \S[^\n]* in [0-9.]+[µm]?s, (ran|reused)[^\n]*\n`)

// stageLines picks the per-stage lines out of a build's progress.
func stageLines(log string) string {
	return strings.Join(stageLine.FindAllString(log, -1), "")
}

// distRow prints the median and range of ours and of the baseline and the ratio of the medians.
func distRow(w io.Writer, name string, ours, base []time.Duration, what string) {
	d := func(ds []time.Duration) string {
		s := slices.Clone(ds)
		slices.Sort(s)
		return fmt.Sprintf("%.3f s (%.3f–%.3f)", median(s).Seconds(), s[0].Seconds(), s[len(s)-1].Seconds())
	}
	fmt.Fprintf(w, "%s\t%s\t%s\t%.2f\t%s\t\n", name, d(ours), d(base), median(ours).Seconds()/median(base).Seconds(), what)
}

// medianIndex is the index in ds of its median element.
func medianIndex(ds []time.Duration) int {
	m := median(ds)
	return slices.Index(ds, m)
}

func hashTree(dir string) error {
	return filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(sha256.New(), f)
		return err
	})
}
