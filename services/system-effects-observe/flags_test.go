package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFlagsNameWhatIsMissing(t *testing.T) {
	_, err := parseFlags([]string{"-evidence", "/var/lib/x", "-protocol", "3"}, io.Discard)
	if err == nil {
		t.Fatal("parseFlags accepted a command line without ids and paths")
	}
	for _, f := range []string{"-cgroup", "-workspace", "-shared", "-run-id", "-agent", "-session", "-baseline"} {
		if !strings.Contains(err.Error(), f+":") {
			t.Errorf("error %q does not name %s", err, f)
		}
	}
}

func TestScopeOverlappingTheWorkspaceIsRefused(t *testing.T) {
	dir := t.TempDir()
	sc := filepath.Join(dir, "scope.json")
	if err := os.WriteFile(sc, []byte(`{"paths":["/srv"]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := parseFlags([]string{"-evidence", "/var/lib/x", "-scope", sc, "-cgroup", "/sys/fs/cgroup/a", "-workspace", "/srv/w/current",
		"-shared", "/srv/w/shared", "-run-id", "r", "-agent", "a", "-session", "s"}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "overlaps") {
		t.Errorf("parseFlags = %v, want the overlap named", err)
	}
}
