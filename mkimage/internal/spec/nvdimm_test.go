package spec

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseNvdimm(t *testing.T) {
	img, diags := Parse("test.hcl", []byte(validSpec), "../../../images")
	if diags.HasErrors() {
		t.Fatal(render(t, diags))
	}
	if img.Kata.Nvdimm {
		t.Error("kata.nvdimm defaults to true; want false")
	}
	src := strings.Replace(validSpec, `boot_mode = "image"`, "boot_mode = \"image\"\n  nvdimm    = true", 1)
	img, diags = Parse("test.hcl", []byte(src), "../../../images")
	if diags.HasErrors() {
		t.Fatal(render(t, diags))
	}
	if !img.Kata.Nvdimm {
		t.Error("nvdimm = true did not set Kata.Nvdimm")
	}
}

func TestParseNvdimmErrors(t *testing.T) {
	for _, tc := range []struct {
		name, old, new string
		want           []string
	}{{
		name: "nvdimm in initrd mode",
		old:  `boot_mode = "image"`,
		new:  "boot_mode = \"initrd\"\n  nvdimm    = true",
		want: []string{`37:15: NVDIMM needs image mode: kata.nvdimm attaches the root disk image as an NVDIMM, but kata.boot_mode is "initrd", which boots no disk. Set boot_mode = "image" or remove nvdimm.`},
	}, {
		name: "nvdimm as a string",
		old:  `boot_mode = "image"`,
		new:  "boot_mode = \"image\"\n  nvdimm    = \"on\"",
		want: []string{`37:15: Unsuitable value type: Unsuitable value: a bool is required`},
	}, {
		name: "nvdimm typo",
		old:  `boot_mode = "image"`,
		new:  "boot_mode = \"image\"\n  nvdim     = true",
		want: []string{`37:3: Unsupported argument: An argument named "nvdim" is not expected here. Did you mean "nvdimm"?`},
	}, {
		name: "nvdimm off in initrd mode is fine",
		old:  `boot_mode = "image"`,
		new:  "boot_mode = \"initrd\"\n  nvdimm    = false",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			src := strings.Replace(validSpec, tc.old, tc.new, 1)
			if src == validSpec {
				t.Fatalf("edit %q not found in the base spec", tc.old)
			}
			_, diags := Parse("test.hcl", []byte(src), "../../../images")
			if diff := cmp.Diff(tc.want, render(t, diags)); diff != "" {
				t.Errorf("diagnostics (-want +got):\n%s", diff)
			}
		})
	}
}
