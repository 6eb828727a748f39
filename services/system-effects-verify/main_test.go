package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
)

// TestCannotRun: a verifier that cannot read its set exits 2 (the daemon
// then treats it as a verifier fault), never 0 or 1.
func TestCannotRun(t *testing.T) {
	for _, args := range [][]string{nil, {"a", "b"}, {filepath.Join(t.TempDir(), "missing")}} {
		var out, errOut bytes.Buffer
		if code := run(args, &out, &errOut); code != 2 || errOut.Len() == 0 {
			t.Errorf("run(%q) = %d, stderr %q; want 2 with a message", args, code, errOut.String())
		}
	}
}

// TestEmptyDirIsIncomplete: an empty directory is an unclosed set, judged
// (exit 1) and reported, not an error.
func TestEmptyDirIsIncomplete(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{t.TempDir()}, &out, &errOut); code != 1 || !strings.Contains(out.String(), `"evidence":"INCOMPLETE"`) {
		t.Errorf("exit %d, stdout %q, stderr %q; want 1 and INCOMPLETE", code, out.String(), errOut.String())
	}
}
