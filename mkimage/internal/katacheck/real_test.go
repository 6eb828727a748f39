package katacheck

import (
	"context"
	"github.com/allox-os/allox/internal/testenv"
	"testing"

	"github.com/allox-os/allox/internal/artifact"
)

// TestBuiltArtifacts checks the real output of `make image` (../../../out, or $ALLOX_OUT): every
// rule that applies must pass.
func TestBuiltArtifacts(t *testing.T) {
	dir := testenv.NeedOut(t, artifact.Boot, artifact.KernelConfig, artifact.KataDir)
	r, err := Check(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kata-check %s:\n%s", dir, r)
	if err := r.Err(); err != nil {
		t.Error(err)
	}
}
