package testenv

import (
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
