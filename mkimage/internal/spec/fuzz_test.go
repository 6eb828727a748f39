package spec

import (
	"io"
	"os"
	"testing"
)

// FuzzParse feeds arbitrary text to the front end. Parse must not panic, must return an image
// exactly when there is no error, must give every diagnostic a range inside the input, and an
// image it accepts must make a manifest that init accepts.
func FuzzParse(f *testing.F) {
	for _, name := range []string{defaultSpec, "testdata/errors.hcl"} {
		src, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(src)
	}
	f.Add([]byte(validSpec))
	f.Add([]byte(`service "a" { after = ["a"] ready { tcp = "" path = "" } }`))
	f.Add([]byte(`init { fw_cfg "x" { mode = [1] } network { address = "::/0" } }`))
	f.Fuzz(func(t *testing.T, src []byte) {
		img, diags := Parse("fuzz.hcl", src, "../../../images")
		if (img == nil) != diags.HasErrors() {
			t.Fatalf("Parse returned image %v with diagnostics %v", img != nil, diags)
		}
		for _, d := range diags {
			if s := d.Subject; s != nil && (s.Start.Byte > s.End.Byte || s.End.Byte > len(src)) {
				t.Errorf("diagnostic %q has range %v outside the %d-byte input", d.Summary, s, len(src))
			}
		}
		if err := FormatDiagnostics(io.Discard, "fuzz.hcl", src, diags); err != nil {
			t.Errorf("FormatDiagnostics: %v", err)
		}
		if img != nil {
			if err := img.Manifest().Validate(); err != nil {
				t.Errorf("accepted image has an invalid manifest: %v", err)
			}
		}
	})
}
