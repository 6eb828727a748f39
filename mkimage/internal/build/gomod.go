package build

import (
	"debug/buildinfo"
	"fmt"

	"github.com/allox-os/allox/rootfs"
)

// GoBinary is one Go program in the image, as its embedded build information describes it.
type GoBinary struct {
	Path      string     `json:"path"`    // where it lives in the image
	Package   string     `json:"package"` // the main package it was built from
	GoVersion string     `json:"go_version"`
	Tags      string     `json:"tags,omitempty"`
	Modules   []GoModule `json:"modules"` // the main module first, then every dependency linked in
}

// GoModule is one module linked into a binary; Sum is its go.sum hash (empty for the main module,
// built from the checkout).
type GoModule struct {
	Path    string `json:"path"`
	Version string `json:"version"`
	Sum     string `json:"sum,omitempty"`
}

// readGoBinaries reads the module versions of every built binary from its build info.
func readGoBinaries(bins []rootfs.Binary) ([]GoBinary, error) {
	out := make([]GoBinary, 0, len(bins))
	for _, b := range bins {
		info, err := buildinfo.ReadFile(b.Source)
		if err != nil {
			return nil, fmt.Errorf("read build info of %s: %w", b.Path, err)
		}
		gb := GoBinary{Path: b.Path, Package: info.Path, GoVersion: info.GoVersion,
			Modules: []GoModule{{Path: info.Main.Path, Version: info.Main.Version, Sum: info.Main.Sum}}}
		for _, s := range info.Settings {
			if s.Key == "-tags" {
				gb.Tags = s.Value
			}
		}
		for _, d := range info.Deps {
			if d.Replace != nil {
				d = d.Replace
			}
			gb.Modules = append(gb.Modules, GoModule{Path: d.Path, Version: d.Version, Sum: d.Sum})
		}
		out = append(out, gb)
	}
	return out, nil
}

// modulePURL is the package URL of a Go module, e.g. pkg:golang/golang.org/x/sys@v0.50.0.
func modulePURL(m GoModule) string {
	purl := "pkg:golang/" + m.Path
	if m.Version != "" && m.Version != "(devel)" {
		purl += "@" + m.Version
	}
	return purl
}
