package build

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/allox-os/allox/mkimage/internal/spec"
	"github.com/allox-os/allox/rootfs"
)

// modulePath is the Go module the guest binaries are built from.
const modulePath = "github.com/allox-os/allox"

// initPackage is the Go PID 1.
const initPackage = "./init"

// InitPath is where the Go init lives in the disk image; the initramfs also links it at /init.
const InitPath = "/sbin/init"

// buildBinaries compiles the Go init and every service that names a Go package, as static,
// reproducible linux/amd64 binaries (no cgo, trimmed paths, no build id, no VCS stamp).
func buildBinaries(ctx context.Context, s *state) error {
	targets := []target{{Binary: rootfs.Binary{Path: InitPath, Source: initPackage}}}
	for _, svc := range s.opt.Spec.Services {
		if svc.Build != "" {
			targets = append(targets, target{Binary: rootfs.Binary{Path: svc.Command[0], Source: svc.Build}, tags: pluginTags(svc.Plugins)})
		}
		targets = append(targets, pluginTargets(svc.Plugins)...)
	}
	for _, pkg := range builtPackages(s.opt.Spec.Services) {
		for _, prog := range spec.CompanionPrograms[pkg] {
			targets = append(targets, target{Binary: rootfs.Binary{Path: prog.Path, Source: prog.Package}})
		}
	}
	var pins []string
	built, err := s.goBinaries(ctx, targets)
	if err != nil {
		return err
	}
	for i, t := range targets {
		out := built[i]
		detail := modulePath + "/" + path.Clean(t.Source)
		if len(t.tags) > 0 {
			detail += " -tags " + strings.Join(t.tags, ",")
		}
		if err := s.prov.addInput("go-binary", t.Path, detail, out); err != nil {
			return err
		}
		s.bins = append(s.bins, rootfs.Binary{Path: t.Path, Source: out})
		if t.pinned {
			sum, err := s.hash(out)
			if err != nil {
				return err
			}
			pins = append(pins, sum+"  "+t.Path+"\n")
		}
	}
	for _, svc := range s.opt.Spec.Services {
		for _, p := range svc.Plugins {
			files := spec.PluginFilesOf(svc, p)
			for _, path := range slices.Sorted(maps.Keys(files)) {
				s.files = append(s.files, rootfs.File{Path: path, Data: []byte(files[path])})
			}
		}
	}
	if err := addCompanionFiles(s); err != nil {
		return err
	}
	if len(pins) > 0 {
		slices.Sort(pins)
		s.files = append(s.files, rootfs.File{Path: spec.PinFile, Data: []byte(strings.Join(pins, ""))})
	}
	return nil
}

// builtPackages are the distinct packages the services are built from, sorted: each brings its
// companions (the workspace daemon its client, kuruwad the kuruwa CLI).
func builtPackages(svcs []spec.Service) []string {
	var pkgs []string
	for _, svc := range svcs {
		if svc.Build != "" {
			pkgs = append(pkgs, svc.Build)
		}
	}
	slices.Sort(pkgs)
	return slices.Compact(pkgs)
}

// addCompanionFiles installs spec.CompanionFiles (read from the module) of the packages the
// services are built from, each an input of the provenance.
func addCompanionFiles(s *state) error {
	for _, pkg := range builtPackages(s.opt.Spec.Services) {
		files := spec.CompanionFiles[pkg]
		for _, p := range slices.Sorted(maps.Keys(files)) {
			src := filepath.Join(s.opt.ModuleRoot, files[p])
			data, err := os.ReadFile(src)
			if err != nil {
				return fmt.Errorf("file %s of %s: %w", p, pkg, err)
			}
			if err := s.prov.addInput("daemon-file", p, files[p], src); err != nil {
				return err
			}
			s.files = append(s.files, rootfs.File{Path: p, Data: data})
		}
	}
	return nil
}

// pluginTargets are the separate programs the plugins install (the observer, its verifiers and
// the recover step), for each service that names the plugin.
func pluginTargets(plugins []string) []target {
	var ts []target
	for _, p := range plugins {
		for _, prog := range spec.PluginPrograms[p] {
			ts = append(ts, target{Binary: rootfs.Binary{Path: prog.Path, Source: prog.Package}, pinned: prog.Pinned})
		}
	}
	return ts
}

// target is one Go binary to build, with the build tags of the plugins it links in.
type target struct {
	rootfs.Binary
	tags   []string
	pinned bool // its sha256 goes into spec.PinFile
}

// pluginTags returns the build tags of a service's plugins, sorted so that the order in the spec
// does not change the build.
func pluginTags(plugins []string) []string {
	var tags []string
	for _, p := range plugins {
		tags = append(tags, spec.PluginTag(p))
	}
	slices.Sort(tags)
	return slices.Compact(tags)
}

// goBuildFlags and goBuildEnv make the binaries static and reproducible; both are in every
// binary's key.
var (
	goBuildFlags = []string{"-trimpath", "-buildvcs=false", "-ldflags=-s -w -buildid="}
	goBuildEnv   = []string{"CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64", "GOFLAGS=-mod=readonly"}
)

func goBuild(ctx context.Context, root, pkg string, tags []string, out string) error {
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	args := append(append([]string{"build"}, goBuildFlags...), "-tags="+strings.Join(tags, ","), "-o", out, pkg)
	if msg, err := goCommand(ctx, root, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s (tags %q): %w\n%s", pkg, strings.Join(tags, ","), err, strings.TrimSpace(string(msg)))
	}
	return nil
}
