package spec

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const npmBlock = `rootfs {
  npm "codex" {
    package   = "@openai/codex"
    version   = "0.171.0-linux-x64"
    integrity = "sha512-l66NZkQgdk2C3pbcfULDz42yEUB581MVA6I+Y43Wp4OIqEy73HCdmZ0GTjeAHY2ycuH4N00d9VsLrwT1jxshTw=="
    bin       = { "/usr/bin/codex" = "vendor/x86_64-unknown-linux-musl/bin/codex" }
  }
}
`

func TestNpmPackageDecoded(t *testing.T) {
	img, diags := Parse("test.hcl", []byte(validSpec+npmBlock), "../../../images")
	if diags.HasErrors() {
		t.Fatalf("%v", render(t, diags))
	}
	want := []NpmPackage{{Name: "codex", Package: "@openai/codex", Version: "0.171.0-linux-x64",
		Integrity: "sha512-l66NZkQgdk2C3pbcfULDz42yEUB581MVA6I+Y43Wp4OIqEy73HCdmZ0GTjeAHY2ycuH4N00d9VsLrwT1jxshTw==",
		Bin:       map[string]string{"/usr/bin/codex": "vendor/x86_64-unknown-linux-musl/bin/codex"}}}
	if d := cmp.Diff(want, img.Rootfs.Npm); d != "" {
		t.Errorf("rootfs.npm (-want +got):\n%s", d)
	}
}

// Each bad value is refused with a message that names the block, the field and the fix.
func TestNpmPackageErrors(t *testing.T) {
	tests := []struct {
		name, old, new, want string
	}{
		{"version range", `"0.171.0-linux-x64"`, `"^0.171.0"`, `Version not pinned: npm "codex": version "^0.171.0" is not one exact version`},
		{"version tag", `"0.171.0-linux-x64"`, `"latest"`, `Version not pinned: npm "codex": version "latest"`},
		{"bad package name", `"@openai/codex"`, `"@OpenAI/Codex"`, `Invalid npm package name: npm "codex": package "@OpenAI/Codex"`},
		{"integrity sha1", `"sha512-l66N`, `"sha1-l66N`, `Invalid npm integrity: npm "codex": integrity must be the registry's sha512`},
		{"integrity short", `Tw=="`, `"`, `Invalid npm integrity`},
		{"relative install path", `"/usr/bin/codex" =`, `"usr/bin/codex" =`, `Invalid install path: npm "codex": bin key "usr/bin/codex" must be a clean absolute path`},
		{"file outside the package", `"vendor/x86_64-unknown-linux-musl/bin/codex"`, `"../../etc/shadow"`, `Invalid package file: npm "codex": bin "/usr/bin/codex" = "../../etc/shadow"`},
		{"nothing to install", `{ "/usr/bin/codex" = "vendor/x86_64-unknown-linux-musl/bin/codex" }`, `{}`, `Nothing to install: npm "codex"`},
		{"bad block name", `npm "codex"`, `npm "Codex CLI"`, `Invalid npm block name`},
		{"missing integrity", "    integrity = \"sha512-l66NZkQgdk2C3pbcfULDz42yEUB581MVA6I+Y43Wp4OIqEy73HCdmZ0GTjeAHY2ycuH4N00d9VsLrwT1jxshTw==\"\n", "", `The argument "integrity" is required`},
		{"unknown field", `    bin       =`, `    binary    =`, `An argument named "binary" is not expected here.`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := strings.Replace(validSpec+npmBlock, tt.old, tt.new, 1)
			if src == validSpec+npmBlock {
				t.Fatalf("edit %q not applied", tt.old)
			}
			img, diags := Parse("test.hcl", []byte(src), "../../../images")
			got := strings.Join(render(t, diags), "\n")
			if img != nil || !strings.Contains(got, tt.want) {
				t.Errorf("got diagnostics:\n%s\nwant one containing %q", got, tt.want)
			}
		})
	}
}

func TestNpmPathInstalledTwice(t *testing.T) {
	inner := strings.TrimSuffix(strings.TrimPrefix(npmBlock, "rootfs {\n"), "}\n")
	src := validSpec + "rootfs {\n" + inner + strings.Replace(inner, `npm "codex"`, `npm "codex2"`, 1) + "}\n"
	_, diags := Parse("test.hcl", []byte(src), "../../../images")
	if got := strings.Join(render(t, diags), "\n"); !strings.Contains(got, `Path installed twice: npm "codex2": /usr/bin/codex is also installed by npm "codex"`) {
		t.Errorf("got diagnostics:\n%s", got)
	}
}
