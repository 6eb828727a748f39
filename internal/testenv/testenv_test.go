package testenv

import (
	"flag"
	"os"
	"path/filepath"
	"testing"
)

// fake records how a test would have been stopped.
type fake struct {
	testing.TB
	skipped, failed string
}

func (f *fake) Helper()           {}
func (f *fake) Skip(args ...any)  { f.skipped = args[0].(string) }
func (f *fake) Fatal(args ...any) { f.failed = args[0].(string) }

func TestUnavailableSkipsOrFailsInCI(t *testing.T) {
	t.Setenv("CI", "")
	f := &fake{TB: t}
	Unavailable(f, "needs %s", "x")
	if f.skipped != "needs x" || f.failed != "" {
		t.Errorf("outside CI: skipped %q failed %q, want a skip", f.skipped, f.failed)
	}
	t.Setenv("CI", "true")
	f = &fake{TB: t}
	Unavailable(f, "needs %s", "x")
	if f.failed == "" || f.skipped != "" {
		t.Errorf("CI=true: skipped %q failed %q, want a failure", f.skipped, f.failed)
	}
}

func TestOut(t *testing.T) {
	t.Setenv("ALLOX_OUT", "/somewhere")
	if got := Out(); got != "/somewhere" {
		t.Errorf("Out with ALLOX_OUT = %q", got)
	}
	t.Setenv("ALLOX_OUT", "")
	root, _ := filepath.Abs("../..") // this package is internal/testenv
	if got := Out(); got != filepath.Join(root, "out") {
		t.Errorf("Out = %q, want %s/out", got, root)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatal(err)
	}
}

// make unit (-short) promises no image and no QEMU: a test that needs the built image skips
// even where the image is built; without -short it runs.
func TestNeedOutSkipsUnderShort(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "bzImage"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("ALLOX_OUT", dir)
	t.Setenv("CI", "")
	was := testing.Short()
	defer flag.Set("test.short", map[bool]string{true: "true", false: "false"}[was])
	for _, short := range []bool{true, false} {
		if err := flag.Set("test.short", map[bool]string{true: "true", false: "false"}[short]); err != nil {
			t.Fatal(err)
		}
		f := &fake{TB: t}
		NeedOut(f, "bzImage")
		if (f.skipped != "") != short || f.failed != "" {
			t.Errorf("-short=%v: skipped %q failed %q", short, f.skipped, f.failed)
		}
	}
}
