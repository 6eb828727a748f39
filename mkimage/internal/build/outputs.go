package build

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/allox-os/allox/internal/artifact"
)

// SBOMName is the SPDX 2.3 JSON software bill of materials, beside the manifest.
const SBOMName = "sbom.spdx.json"

// runtimeFiles are files that launchers keep in an output directory and that no build writes:
// the workspace store disk of `make boot` (qemu-tests/cmd/allox-boot) and the rollout manifest
// `mkimage push` writes (deploy/fleet.DaemonSetFile); and the attestation `mkimage attest` signs
// after the build (its subjects are the outputs and the manifest).
var runtimeFiles = map[string]bool{"workspace.img": true, "allox-deploy.yaml": true, artifact.Attestation: true}

// OutputFiles lists the artifacts of the build in dir, slash-separated and sorted: every regular file
// below dir except the manifest itself, hidden files (a build's scratch space), the files launchers
// keep there (runtimeFiles) and other builds nested inside (a directory with its own manifest.json,
// such as out/process-tree).
func OutputFiles(dir string) ([]string, error) {
	var names []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if p != dir && strings.HasPrefix(name, ".") {
			return skip(d)
		}
		if d.IsDir() {
			if _, err := os.Stat(filepath.Join(p, artifact.Manifest)); p != dir && err == nil {
				return filepath.SkipDir
			}
			return nil
		}
		r := rel(dir, p)
		if r == artifact.Manifest || runtimeFiles[r] || !d.Type().IsRegular() {
			return nil
		}
		names = append(names, r)
		return nil
	})
	sort.Strings(names)
	return names, err
}

func skip(d fs.DirEntry) error {
	if d.IsDir() {
		return filepath.SkipDir
	}
	return nil
}

// hashOutputs hashes every artifact in dir with sum (nil: sha256 of the file).
func hashOutputs(dir string, sum func(string) (string, error)) ([]Output, error) {
	names, err := OutputFiles(dir)
	if err != nil {
		return nil, err
	}
	outs := make([]Output, 0, len(names))
	for _, name := range names {
		o, err := hashOutput(dir, name, sum)
		if err != nil {
			return nil, err
		}
		outs = append(outs, o)
	}
	return outs, nil
}

func hashOutput(dir, name string, sum func(string) (string, error)) (Output, error) {
	p := filepath.Join(dir, filepath.FromSlash(name))
	if sum == nil {
		sum = artifact.SHA256File
	}
	st, err := os.Stat(p)
	if err != nil {
		return Output{}, err
	}
	h, err := sum(p)
	if err != nil {
		return Output{}, fmt.Errorf("hash %s: %w", name, err)
	}
	return Output{Path: name, Size: st.Size(), SHA256: h}, nil
}
