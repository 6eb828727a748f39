package cli

import (
	"github.com/allox-os/allox/internal/testenv"
	"strings"
	"testing"
)

func TestKataCheckBuiltOutput(t *testing.T) {
	out := testenv.NeedOut(t, "kata")
	code, stdout, stderr := run(t, "kata-check", "-out", out)
	if code != 0 || !strings.Contains(stdout, "ok   kernel-config") || !strings.Contains(stdout, "meets the Kata contract") {
		t.Errorf("kata-check -out %s: exit %d\nstdout:\n%s\nstderr:\n%s", out, code, stdout, stderr)
	}
}

func TestKataCheckNoArtifacts(t *testing.T) {
	code, _, stderr := run(t, "kata-check", "-out", t.TempDir())
	if code != 1 || !strings.Contains(stderr, "build the image first: mkimage build") {
		t.Errorf("kata-check on an empty directory: exit %d, stderr %q; want 1 and how to build", code, stderr)
	}
	if code, _, _ := run(t, "kata-check", "a.hcl", "b.hcl"); code != 2 {
		t.Errorf("kata-check with two specs: exit %d; want 2 (usage)", code)
	}
}
