package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDiffCommand(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	for _, d := range []string{a, b} {
		if err := os.WriteFile(filepath.Join(d, "boot.json"), []byte("{\n  \"rpc_port\": 8093\n}\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if code, out, errs := run(t, "diff", a, b); code != 0 || !strings.Contains(out, "identical") {
		t.Errorf("identical dirs: code %d, stdout %q, stderr %q", code, out, errs)
	}
	if err := os.WriteFile(filepath.Join(b, "boot.json"), []byte("{\n  \"rpc_port\": 8094\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs := run(t, "diff", a, b)
	if code != 1 || !strings.Contains(out, `boot.json: line 2: "  \"rpc_port\": 8093" vs "  \"rpc_port\": 8094"`) ||
		!strings.Contains(errs, "1 artifact(s) differ") {
		t.Errorf("differing dirs: code %d, stdout %q, stderr %q", code, out, errs)
	}
	if code, _, errs := run(t, "diff", a); code != 2 || !strings.Contains(errs, "usage: mkimage diff DIR1 DIR2") {
		t.Errorf("one argument: code %d, stderr %q", code, errs)
	}
}

func TestVerifyCommandWithoutManifest(t *testing.T) {
	dir := t.TempDir()
	code, _, errs := run(t, "verify", dir)
	if code != 1 || !strings.Contains(errs, "build the image first: mkimage build -out "+dir) {
		t.Errorf("code %d, stderr %q", code, errs)
	}
}
