package build

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// A Go binary is keyed by everything `go build` reads: the toolchain (GOVERSION, GOROOT and the
// settings that change code generation), the build flags, the tags, go.mod and go.sum, and every
// package linked in: a standard package by its import path (GOROOT and the version cover its
// files), a module from the module cache by its path and version (the cache is immutable), a
// package of the checkout by the names and contents of all its source files (those a build
// constraint leaves out too: an edit can bring them in). `go list -deps` runs on every build, so a
// file added to a package or an import added is seen.

// goListFields are the fields of `go list -json` the key reads.
const goListFields = "ImportPath,Dir,Standard,Module,GoFiles,CgoFiles,IgnoredGoFiles,IgnoredOtherFiles," +
	"EmbedFiles,SFiles,HFiles,CFiles,SysoFiles,Deps,Error,DepsErrors"

type goPackage struct {
	ImportPath string
	Dir        string
	Standard   bool
	Module     *goListModule
	GoFiles, CgoFiles, IgnoredGoFiles, IgnoredOtherFiles, EmbedFiles,
	SFiles, HFiles, CFiles, SysoFiles []string
	Deps       []string
	Error      *struct{ Err string }
	DepsErrors []*struct{ Err string }
}

type goListModule struct {
	Path, Version string
	Main          bool
	Replace       *goListModule
}

// goEnvVars are the toolchain settings in every binary's key.
var goEnvVars = []string{"GOVERSION", "GOROOT", "GOAMD64", "GOEXPERIMENT", "GOFLAGS", "GOTOOLCHAIN"}

func goCommand(ctx context.Context, root string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), goBuildEnv...)
	return cmd
}

// goToolchain is the part of every key that names the toolchain and the module's requirements.
func goToolchain(ctx context.Context, root string) (string, error) {
	out, err := goCommand(ctx, root, append([]string{"env"}, goEnvVars...)...).Output()
	if err != nil {
		return "", fmt.Errorf("go env: %w", err)
	}
	h := sha256.New()
	fmt.Fprintf(h, "allox go binary\nflags %q\nenv %q\n%s", goBuildFlags, goBuildEnv, out)
	for _, name := range []string{"go.mod", "go.sum", "go.work", "go.work.sum"} {
		data, err := os.ReadFile(filepath.Join(root, name))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return "", err
		}
		fmt.Fprintf(h, "%s %d\n%s\n", name, len(data), data)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// goList lists the packages of pkgs and all their dependencies, built with tags.
func goList(ctx context.Context, root string, tags []string, pkgs []string) (map[string]*goPackage, error) {
	args := append([]string{"list", "-e", "-deps", "-json=" + goListFields, "-tags=" + strings.Join(tags, ",")}, pkgs...)
	var stderr bytes.Buffer
	cmd := goCommand(ctx, root, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list %s: %w\n%s", strings.Join(pkgs, " "), err, strings.TrimSpace(stderr.String()))
	}
	list := map[string]*goPackage{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p goPackage
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			return list, nil
		} else if err != nil {
			return nil, fmt.Errorf("go list output: %w", err)
		}
		list[p.ImportPath] = &p
	}
}

// packageDigest is what one package contributes to a key; "" when the package cannot be keyed
// (go list reported an error: go build will report it).
func packageDigest(p *goPackage) (string, error) {
	if p.Error != nil || len(p.DepsErrors) > 0 {
		return "", nil
	}
	if p.Standard {
		return "std", nil
	}
	if m := p.Module; m != nil && !m.Main && m.Version != "" && (m.Replace == nil || m.Replace.Version != "") {
		d := "module " + m.Path + "@" + m.Version
		if m.Replace != nil {
			d += " => " + m.Replace.Path + "@" + m.Replace.Version
		}
		return d, nil
	}
	var names []string
	for _, list := range [][]string{p.GoFiles, p.CgoFiles, p.IgnoredGoFiles, p.IgnoredOtherFiles, p.EmbedFiles,
		p.SFiles, p.HFiles, p.CFiles, p.SysoFiles} {
		names = append(names, list...)
	}
	slices.Sort(names)
	h := sha256.New()
	for _, name := range slices.Compact(names) {
		data, err := os.ReadFile(filepath.Join(p.Dir, name))
		if err != nil {
			return "", fmt.Errorf("key %s: %w", p.ImportPath, err)
		}
		fmt.Fprintf(h, "%s %d\n", name, len(data))
		h.Write(data)
	}
	return "files " + hex.EncodeToString(h.Sum(nil)), nil
}

// binaryKey keys the binary of main package importPath: the toolchain, its tags and the digest of
// every package it links. It returns the per-package digests too, to say what changed; ok is false
// when a package cannot be keyed.
func binaryKey(toolchain string, tags []string, importPath string, list map[string]*goPackage) (key string, pkgs map[string]string, ok bool, err error) {
	root, found := list[importPath]
	if !found {
		return "", nil, false, nil
	}
	pkgs = map[string]string{}
	for _, ip := range append(slices.Clone(root.Deps), importPath) {
		p, found := list[ip]
		if !found {
			return "", nil, false, nil
		}
		d, err := packageDigest(p)
		if err != nil || d == "" {
			return "", nil, false, err
		}
		pkgs[ip] = d
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\ntags %q\nmain %s\n", toolchain, tags, importPath)
	for _, ip := range slices.Sorted(maps.Keys(pkgs)) {
		fmt.Fprintf(h, "%s %s\n", ip, pkgs[ip])
	}
	return hex.EncodeToString(h.Sum(nil)), pkgs, true, nil
}

// changedPackages names the packages whose digest differs between two builds of one binary.
func changedPackages(old, cur map[string]string) string {
	var changed []string
	for ip, d := range cur {
		if old[ip] != d {
			changed = append(changed, strings.TrimPrefix(ip, modulePath+"/"))
		}
	}
	for ip := range old {
		if _, ok := cur[ip]; !ok {
			changed = append(changed, strings.TrimPrefix(ip, modulePath+"/")+" (no longer linked)")
		}
	}
	slices.Sort(changed)
	if len(changed) > 3 {
		changed = append(changed[:3], fmt.Sprintf("%d more", len(changed)-3))
	}
	return strings.Join(changed, ", ")
}
