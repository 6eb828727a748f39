package rootfs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestHostMirror(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		suite string
		want  string // "" means an error
	}{{
		name:  "deb822 with other vendors first",
		suite: "bookworm",
		files: map[string]string{
			"sources.list.d/a-nodesource.sources": "Types: deb\nURIs: https://deb.nodesource.com/node_20.x\nSuites: nodistro\nComponents: main\n",
			"sources.list.d/cloud.list.disabled":  "deb https://packages.example.com/apt bookworm main\n",
			"sources.list.d/debian.sources": "# comment\nTypes: deb\n# http://snapshot-mirror.example/archive/debian/20250520T000000Z\nURIs: http://mirror.example/debian\n" +
				"Suites: bookworm bookworm-updates\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n" +
				"Types: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\nComponents: main\n",
		},
		want: "http://mirror.example/debian",
	}, {
		name:  "one-line with options, deb-src and a disabled stanza",
		suite: "bookworm",
		files: map[string]string{
			"sources.list": "# deb http://old/debian bookworm main\ndeb-src http://src.example/debian bookworm main\n" +
				"deb [arch=amd64 signed-by=/k.gpg] http://mirror.example/debian/ bookworm main contrib # trailing\n",
			"sources.list.d/z.sources": "Enabled: no\nTypes: deb\nURIs: http://disabled/debian\nSuites: bookworm\nComponents: main\n",
		},
		want: "http://mirror.example/debian/",
	}, {
		name:  "other suite falls back to a Debian mirror",
		suite: "trixie",
		files: map[string]string{
			"sources.list": "deb http://vendor.example/apt trixie-extras main\ndeb http://other-mirror.example/debian bookworm main\n",
		},
		want: "http://other-mirror.example/debian",
	}, {
		name:  "no main component",
		suite: "bookworm",
		files: map[string]string{"sources.list": "deb http://mirror.example/debian bookworm contrib\n"},
	}, {
		name:  "nothing",
		suite: "bookworm",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, content := range tc.files {
				must(t, os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755))
				must(t, os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644))
			}
			got, err := HostMirror(dir, tc.suite)
			switch {
			case tc.want == "" && (err == nil || !strings.Contains(err.Error(), "set the mirror explicitly")):
				t.Errorf("HostMirror = %q, %v; want an error suggesting a mirror", got, err)
			case tc.want != "" && (err != nil || got != tc.want):
				t.Errorf("HostMirror = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestParsePackages(t *testing.T) {
	in := `Package: zlib1g
Version: 1:1.2.13.dfsg-1
Architecture: amd64

Package: busybox
Status: install ok installed
Version: 1:1.35.0-4+deb12u1+b1
Architecture: amd64
Description: Tiny utilities
 continuation line

Package: removed
Status: deinstall ok config-files
Version: 1
`
	got, err := ParsePackages(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []Package{{"busybox", "1:1.35.0-4+deb12u1+b1", "amd64"}, {"zlib1g", "1:1.2.13.dfsg-1", "amd64"}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("ParsePackages (-want +got):\n%s", d)
	}
	for _, bad := range []string{"Package: x\n", " orphan continuation\n", "no colon here\n"} {
		if _, err := ParsePackages(strings.NewReader(bad)); err == nil {
			t.Errorf("ParsePackages(%q) succeeded", bad)
		}
	}
}
