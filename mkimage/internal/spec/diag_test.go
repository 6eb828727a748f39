package spec

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// TestFormatDiagnostics checks the text mkimage prints for a bad spec against a golden file.
func TestFormatDiagnostics(t *testing.T) {
	const spec = "testdata/errors.hcl"
	golden := filepath.Join("testdata", "errors.golden")
	src, err := os.ReadFile(spec)
	if err != nil {
		t.Fatal(err)
	}
	img, diags := Load(spec)
	if img != nil || !diags.HasErrors() {
		t.Fatalf("Load(%s) = %v, %v; want errors", spec, img, diags)
	}
	var got bytes.Buffer
	if err := FormatDiagnostics(&got, spec, src, diags); err != nil {
		t.Fatal(err)
	}
	// With src nil, FormatDiagnostics reads the file itself, as after Load.
	var fromFile bytes.Buffer
	if err := FormatDiagnostics(&fromFile, spec, nil, diags); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(got.String(), fromFile.String()); diff != "" {
		t.Errorf("FormatDiagnostics with src nil differs (-src +nil):\n%s", diff)
	}
	if *update {
		if err := os.WriteFile(golden, got.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), got.String()); diff != "" {
		t.Errorf("FormatDiagnostics mismatch (-%s +got); if intended, run go test -update:\n%s", golden, diff)
	}
	// Every diagnostic carries a position and a snippet.
	if n, want := strings.Count(got.String(), " | "), 2*len(diags); n != want || strings.Count(got.String(), spec+":") != len(diags) {
		t.Errorf("%d of %d diagnostics have a source position", n, want)
	}
}
