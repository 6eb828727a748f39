package build

import (
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
)

// binRecord is one Go binary of a build: its key and the digest of each package linked into it,
// so the next build can say which packages changed.
type binRecord struct {
	Key      string            `json:"key"`
	Packages map[string]string `json:"packages"`
}

// goBinaryCache is the directory below the cache where built binaries are kept by key.
const goBinaryCache = "go-binaries"

// goBinaries returns, for each target, a binary built from its current inputs: the one an earlier
// build made from the same inputs (by key, from the cache), or a new one.
func (s *state) goBinaries(ctx context.Context, targets []target) ([]string, error) {
	root := s.opt.ModuleRoot
	toolchain, err := goToolchain(ctx, root)
	if err != nil {
		return nil, err
	}
	lists, err := goLists(ctx, root, targets)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(s.opt.CacheDir, goBinaryCache)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("go binary cache: %w", err)
	}
	if s.next.Binaries == nil {
		s.next.Binaries = map[string]binRecord{}
	}
	out := make([]string, len(targets))
	var rebuilt []string
	for i, t := range targets {
		ip := modulePath + "/" + path.Clean(t.Source)
		key, pkgs, ok, err := binaryKey(toolchain, t.tags, ip, lists[strings.Join(t.tags, ",")])
		if err != nil {
			return nil, err
		}
		if !ok { // go list reported an error: let go build report it
			out[i] = filepath.Join(s.work, "bin", strings.TrimPrefix(t.Path, "/"))
			if err := goBuild(ctx, root, t.Source, t.tags, out[i]); err != nil {
				return nil, err
			}
			rebuilt = append(rebuilt, t.Path+" (its packages could not be listed)")
			continue
		}
		s.next.Binaries[t.Path] = binRecord{Key: key, Packages: pkgs}
		out[i] = filepath.Join(dir, key)
		if _, err := os.Stat(out[i]); err == nil {
			continue
		}
		if err := buildInto(ctx, root, t, out[i]); err != nil {
			return nil, err
		}
		rebuilt = append(rebuilt, t.Path+" ("+s.whyBinary(t.Path, pkgs)+")")
	}
	if len(rebuilt) == 0 {
		s.reused("the inputs of all %d binaries are unchanged", len(targets))
	} else {
		s.ran("rebuilt %s; reused %d", strings.Join(rebuilt, ", "), len(targets)-len(rebuilt))
	}
	return out, nil
}

// whyBinary says what changed since the last build of the binary at p in this output directory.
func (s *state) whyBinary(p string, pkgs map[string]string) string {
	old, ok := s.prev.Binaries[p]
	if !ok {
		return "not built here before"
	}
	if c := changedPackages(old.Packages, pkgs); c != "" {
		return "changed: " + c
	}
	return "the toolchain, the flags or go.mod changed"
}

// buildInto builds t next to dst and renames it there, so that the cache never holds half a binary.
func buildInto(ctx context.Context, root string, t target, dst string) error {
	tmp := fmt.Sprintf("%s.tmp%d", dst, os.Getpid())
	if err := goBuild(ctx, root, t.Source, t.tags, tmp); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, dst)
}

// goLists runs one `go list -deps` per set of tags, concurrently.
func goLists(ctx context.Context, root string, targets []target) (map[string]map[string]*goPackage, error) {
	groups := map[string][]string{}
	tags := map[string][]string{}
	for _, t := range targets {
		k := strings.Join(t.tags, ",")
		groups[k], tags[k] = append(groups[k], t.Source), t.tags
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	lists := map[string]map[string]*goPackage{}
	var firstErr error
	for k, pkgs := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := goList(ctx, root, tags[k], pkgs)
			mu.Lock()
			defer mu.Unlock()
			if err != nil && firstErr == nil {
				firstErr = err
			}
			lists[k] = l
		}()
	}
	wg.Wait()
	return lists, firstErr
}
