package spec

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

func (d *decoder) validateKernel(k *Kernel) {
	d.validateSource(&k.Source)
	if k.Base == "" {
		d.errorf("kernel.base", "Empty kernel base config", "base must be %s, or the path of a config file.", quoteList(baseKeywords))
	}
	d.checkParams("kernel.cmdline", k.Cmdline)
	if p := k.KataParity; p != nil {
		if p.Symbols == "" && !d.failed["kernel.kata_parity.symbols"] {
			d.errorf("kernel.kata_parity.symbols", "Empty Kata symbol list",
				"symbols names the list of Kata's kernel symbols, e.g. \"../kernel/kata/kata-4.1.0-x86_64.conf\" (make kata-fragments writes it).")
		}
		if p.Allowlist == "" && !d.failed["kernel.kata_parity.allowlist"] {
			d.errorf("kernel.kata_parity.allowlist", "Empty parity allow-list",
				"allowlist names the file that says, one symbol a line, why we differ from Kata, e.g. \"../kernel/kata/parity-allowlist\".")
		}
	}
}

func (d *decoder) validateSource(s *KernelSource) {
	const key = "kernel.source"
	switch {
	case s.DebianPackage == "" && s.Tarball == "":
		d.errorf(key, "Missing kernel source",
			"The source block needs debian_package and version (a packaged kernel source), or tarball (a local file).")
	case s.DebianPackage != "" && s.Tarball != "":
		d.errorf(key+".tarball", "Conflicting kernel sources",
			"Set debian_package and version, or tarball, not both: remove tarball or debian_package.")
	}
	switch {
	case s.DebianPackage != "" && s.Version == "":
		d.errorf(key+".debian_package", "Missing kernel source version",
			"debian_package %q needs the exact package version pinned next to it, e.g. version = \"6.12.117-1~deb12u1\".", s.DebianPackage)
	case s.DebianPackage == "" && s.Version != "":
		d.errorf(key+".version", "Kernel source version without a package",
			"version pins a debian_package; add debian_package = \"linux-source-X.Y\" or remove version.")
	}
	if s.DebianPackage != "" && !debPackageRE.MatchString(s.DebianPackage) {
		d.errorf(key+".debian_package", "Invalid package name",
			"%q is not a Debian package name: use lowercase letters, digits, '+', '-' and '.', e.g. \"linux-source-6.12\".", s.DebianPackage)
	}
	if s.Version != "" && !debVersionRE.MatchString(s.Version) {
		d.errorf(key+".version", "Invalid package version",
			"%q is not a Debian version: it starts with a digit (after an optional \"EPOCH:\") and holds letters, digits, '.', '+', '~' and '-'.", s.Version)
	}
	if msg := sha256Problem(s.SHA256); msg != "" {
		d.errorf(key+".sha256", "Invalid sha256", "%s", msg)
	}
}

// sha256Problem explains what is wrong with a hex SHA-256 digest and how to fix it, or returns "".
func sha256Problem(s string) string {
	const howTo = " Compute it with: sha256sum FILE."
	if rest, ok := strings.CutPrefix(s, "sha256:"); ok {
		return fmt.Sprintf("sha256 is the bare hex digest; drop the \"sha256:\" prefix and write %q.", rest)
	}
	if len(s) != 64 {
		return fmt.Sprintf("sha256 must be 64 hex digits; got %d.%s", len(s), howTo)
	}
	i := strings.IndexFunc(s, func(r rune) bool { return !strings.ContainsRune("0123456789abcdef", r) })
	switch {
	case i < 0:
		return ""
	case strings.IndexFunc(strings.ToLower(s), func(r rune) bool { return !strings.ContainsRune("0123456789abcdef", r) }) < 0:
		return fmt.Sprintf("sha256 must be lowercase hex; write %q.", strings.ToLower(s))
	default:
		r, _ := utf8.DecodeRuneInString(s[i:])
		return fmt.Sprintf("sha256 must be 64 hex digits; character %d, %q, is not a hex digit.%s", i+1, r, howTo)
	}
}

// checkParams checks a kernel command line given as a list, one parameter per element.
func (d *decoder) checkParams(key string, params []string) {
	for i, p := range params {
		k := fmt.Sprintf("%s.%d", key, i)
		switch {
		case strings.TrimSpace(p) == "":
			d.errorf(k, "Empty kernel parameter", "Remove the empty element from the list.")
		case strings.ContainsAny(p, " \t\n") && !strings.Contains(p, `"`):
			d.errorf(k, "Kernel parameter contains whitespace",
				"Each list element is one parameter; split %q into %s.", p, hclList(strings.Fields(p)))
		}
	}
}
