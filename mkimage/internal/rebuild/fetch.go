package rebuild

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/allox-os/allox/internal/artifact"
	"github.com/allox-os/allox/mkimage/internal/attest"
	"github.com/allox-os/allox/mkimage/internal/build"
)

// ErrUnavailable marks an input the rebuild cannot get at the version and hash the provenance
// records; the message names it.
var ErrUnavailable = errors.New("input not available as recorded")

func unavailable(d fmt.Stringer, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrUnavailable, d, fmt.Sprintf(format, args...))
}

// checkoutSource writes the recorded source tree into dir: a git repository of its own whose
// objects come from repo's (alternates), with exactly that tree in its index and work tree. The
// tree must be in repo: a clean build's commit fetched, or the tree a build in this checkout wrote.
func checkoutSource(ctx context.Context, repo, dir string, src dep) error {
	tree := src.digest["gitTree"]
	if tree == "" {
		return unavailable(src, "the provenance names no gitTree")
	}
	common, err := build.Git(ctx, repo, nil, "rev-parse", "--path-format=absolute", "--git-common-dir")
	if err != nil {
		return unavailable(src, "%s is no git checkout to find the tree in: %v", repo, err)
	}
	if _, err := build.Git(ctx, repo, nil, "cat-file", "-e", tree+"^{tree}"); err != nil {
		hint := "it was built from uncommitted changes in another checkout"
		if c := src.digest["gitCommit"]; c != "" {
			hint = "fetch commit " + c
		}
		return unavailable(src, "git tree %s is not in the repository at %s: %s", tree, repo, hint)
	}
	if _, err := build.Git(ctx, "", nil, "init", "-q", dir); err != nil {
		return err
	}
	alt := filepath.Join(dir, ".git", "objects", "info", "alternates")
	if err := os.WriteFile(alt, []byte(filepath.Join(common, "objects")+"\n"), 0o644); err != nil {
		return err
	}
	if _, err := build.Git(ctx, dir, nil, "read-tree", tree); err != nil {
		return err
	}
	_, err = build.Git(ctx, dir, nil, "checkout-index", "-a", "-f")
	return err
}

// checkInputs checks every file input the provenance records against the source tree (the spec,
// the fragments, the patches, the allow-lists, the daemon files): each must have its sha256.
func checkInputs(r *recorded, src string) error {
	for _, d := range r.deps {
		var rel string
		switch d.kind {
		case "spec", "fragment", "patch", "allowlist":
			rel = d.name
		case "daemon-file":
			rel = d.detail
		case "kata-agent-binary", "kata-agent-from_image":
			rel = d.name
		default:
			continue
		}
		p := rel
		if !filepath.IsAbs(p) {
			p = filepath.Join(src, filepath.FromSlash(rel))
		}
		got, err := artifact.SHA256File(p)
		if err != nil {
			return unavailable(d, "%v", err)
		}
		if want := d.digest["sha256"]; got != want {
			return unavailable(d, "sha256 %s in the source tree, the provenance records %s", got, want)
		}
	}
	return nil
}

// reproTools are the tools whose version reaches an output outside the kernel (which comes from
// the cache by its key, and the key covers gcc, ld and pahole).
var reproTools = map[string]bool{"go": true, "mke2fs": true, "debugfs": true, "mmdebstrap": true, "veritysetup": true}

// checkTools refuses a tool whose version on this machine is not the recorded one.
func checkTools(ctx context.Context, r *recorded) error {
	have, err := build.Toolchain(ctx)
	if err != nil {
		return err
	}
	local := map[string]string{}
	for _, t := range have {
		local[t.Name] = t.Version
	}
	for _, d := range r.byKind(attest.KindTool) {
		if reproTools[d.name] && local[d.name] != d.version {
			return unavailable(d, "the provenance records %q, this machine has %q: install that version", d.version, local[d.name])
		}
	}
	return nil
}

// checkGoModules refuses a Go module the source tree's go.sum does not pin at the recorded version
// and hash (go build -mod=readonly then fetches exactly those).
func checkGoModules(r *recorded, src string) error {
	data, err := os.ReadFile(filepath.Join(src, "go.sum"))
	if err != nil {
		return err
	}
	pinned := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		pinned[strings.TrimSpace(sc.Text())] = true
	}
	for _, d := range r.byKind(attest.KindGoModule) {
		if d.goSum == "" {
			continue // the main module, built from the tree
		}
		if !pinned[d.name+" "+d.version+" "+d.goSum] {
			return unavailable(d, "the source tree's go.sum does not pin %s %s", d.version, d.goSum)
		}
	}
	return nil
}

// checkPackages compares the Debian packages the rebuild got with the recorded ones.
func checkPackages(r *recorded, p *build.Provenance) error {
	got := map[string]string{}
	for _, pkg := range p.Packages {
		got[pkg.Name] = pkg.Version
	}
	for _, d := range r.byKind(attest.KindDebian) {
		if v, ok := got[d.name]; !ok || v != d.version {
			return unavailable(d, "the provenance records version %s, the mirror served %q: it cannot be had at the recorded version", d.version, v)
		}
	}
	return nil
}
