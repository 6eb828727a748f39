package katacheck

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/allox-os/allox/internal/artifact"
)

// TestBuiltArtifacts checks the real output of `make image` (../../../out, or $ALLOX_OUT): every
// rule that applies must pass.
func TestBuiltArtifacts(t *testing.T) {
	dir := os.Getenv("ALLOX_OUT")
	if dir == "" {
		dir = filepath.Join("..", "..", "..", "out")
	}
	for _, f := range []string{artifact.Boot, artifact.KernelConfig, artifact.KataDir} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s: %v (CI=true: nothing may skip)", dir, err)
			}
			t.Skipf("no built artifacts in %s (%v): run `make image`", dir, err)
		}
	}
	r, err := Check(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kata-check %s:\n%s", dir, r)
	if err := r.Err(); err != nil {
		t.Error(err)
	}
}
