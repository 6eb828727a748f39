package spec

import (
	"strings"
	"testing"
)

func TestSHA256Problem(t *testing.T) {
	good := "585a4a074597aefa2b1a68ada83a3184ba351c127544dea80618bbcceaa3961f"
	tests := []struct{ in, want string }{
		{good, ""},
		{good[:63], "sha256 must be 64 hex digits; got 63. Compute it with: sha256sum FILE."},
		{good + "0", "sha256 must be 64 hex digits; got 65. Compute it with: sha256sum FILE."},
		{strings.ToUpper(good), `sha256 must be lowercase hex; write "` + good + `".`},
		{"sha256:" + good, `sha256 is the bare hex digest; drop the "sha256:" prefix and write "` + good + `".`},
		{"g" + good[1:], `sha256 must be 64 hex digits; character 1, 'g', is not a hex digit. Compute it with: sha256sum FILE.`},
	}
	for _, tt := range tests {
		if got := sha256Problem(tt.in); got != tt.want {
			t.Errorf("sha256Problem(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestBuildFix(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", ""},
		{"./services/workspace-daemon", "./services/workspace-daemon"},
		{"services/workspace-daemon", "./services/workspace-daemon"},
		{"./services//x/", "./services/x"},
		{"./../outside", "./outside"},
		{".", "./services/svc"},
	}
	for _, tt := range tests {
		if got := buildFix(tt.in, "svc"); got != tt.want {
			t.Errorf("buildFix(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestClosest(t *testing.T) {
	options := []string{"always", "on-failure", "never"}
	tests := []struct{ in, want string }{
		{"alway", "always"},
		{"on_failure", "on-failure"},
		{"nevr", "never"},
		{"sometimes", ""},
		{"a", ""}, // too short for any suggestion to mean anything
	}
	for _, tt := range tests {
		if got := closest(tt.in, options); got != tt.want {
			t.Errorf("closest(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
