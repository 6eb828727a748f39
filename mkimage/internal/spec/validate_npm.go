package spec

import (
	"encoding/base64"
	"fmt"
	"maps"
	"path"
	"regexp"
	"slices"
	"strings"
)

var (
	npmNameRE    = regexp.MustCompile(`^(@[a-z0-9][a-z0-9._~-]*/)?[a-z0-9][a-z0-9._~-]*$`)
	npmVersionRE = regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$`)
)

// validateNpm checks the rootfs.npm blocks: names unique, each package pinned to one exact version
// and the registry's sha512 integrity, and every installed path absolute and owned by one package.
func (d *decoder) validateNpm(pkgs []NpmPackage) {
	names := map[string]bool{}
	targets := map[string]string{}
	for i, n := range pkgs {
		key := fmt.Sprintf("rootfs.npm.%d", i)
		d.checkID(key, "npm block name", n.Name)
		if names[n.Name] {
			d.errorf(key, "Duplicate npm block", "rootfs has two npm %q blocks; give each package its own name.", n.Name)
		}
		names[n.Name] = true
		if !npmNameRE.MatchString(n.Package) {
			d.errorf(key+".package", "Invalid npm package name",
				"npm %q: package %q is not an npm package name; write it as the registry does, e.g. \"@openai/codex\" or \"opencode-linux-x64\".", n.Name, n.Package)
		}
		if !npmVersionRE.MatchString(n.Version) {
			d.errorf(key+".version", "Version not pinned",
				"npm %q: version %q is not one exact version; pin it, e.g. \"1.2.3\" (`npm view %s version` prints the latest). Ranges and tags would let the image change under the same spec.", n.Name, n.Version, n.Package)
		}
		d.checkIntegrity(key+".integrity", n)
		d.checkBin(key+".bin", n, targets)
	}
}

func (d *decoder) checkIntegrity(key string, n NpmPackage) {
	b64, ok := strings.CutPrefix(n.Integrity, "sha512-")
	sum, err := base64.StdEncoding.DecodeString(b64)
	if ok && err == nil && len(sum) == 64 {
		return
	}
	d.errorf(key, "Invalid npm integrity",
		"npm %q: integrity must be the registry's sha512 of the tarball, \"sha512-\" and 88 characters of base64, as `npm view %s@%s dist.integrity` prints it; got %q.",
		n.Name, n.Package, n.Version, n.Integrity)
}

func (d *decoder) checkBin(key string, n NpmPackage, targets map[string]string) {
	if len(n.Bin) == 0 {
		d.errorf(key, "Nothing to install", "npm %q: bin must map at least one path in the image to a file of the package, e.g. bin = { \"/usr/bin/codex\" = \"bin/codex\" }.", n.Name)
	}
	for _, dst := range slices.Sorted(maps.Keys(n.Bin)) {
		src := n.Bin[dst]
		if !path.IsAbs(dst) || path.Clean(dst) != dst || dst == "/" {
			d.errorf(key, "Invalid install path", "npm %q: bin key %q must be a clean absolute path in the image, e.g. \"/usr/bin/%s\".", n.Name, dst, path.Base(dst))
		}
		if src == "" || path.IsAbs(src) || path.Clean(src) != src || src == ".." || strings.HasPrefix(src, "../") {
			d.errorf(key, "Invalid package file", "npm %q: bin %q = %q must name a file inside the package, relative to its package/ directory, without \"..\", e.g. \"bin/%s\".", n.Name, dst, src, path.Base(dst))
		}
		if other, dup := targets[dst]; dup {
			d.errorf(key, "Path installed twice", "npm %q: %s is also installed by npm %q; each path in the image comes from one package.", n.Name, dst, other)
		}
		targets[dst] = n.Name
	}
}
