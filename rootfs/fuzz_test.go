package rootfs

import (
	"strings"
	"testing"
)

// FuzzSources feeds host apt configuration, which is outside input, to both source parsers and the
// package-list parser: they may reject it but must not panic, and what they accept is well formed.
func FuzzSources(f *testing.F) {
	for _, s := range []string{
		"deb http://mirror.example/debian bookworm main\n",
		"deb [arch=amd64 signed-by=/k.gpg] http://m/debian bookworm main # c\n",
		"deb [ http://x\n",
		"Types: deb\nURIs: http://mirror.example/debian\nSuites: bookworm\nComponents: main\n\nEnabled: no\n",
		"Package: a\nVersion: 1\n continuation\n",
		" leading continuation\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		for _, parse := range []func(string) ([]aptSource, error){
			func(s string) ([]aptSource, error) { return parseOneLineSources(strings.NewReader(s)) },
			func(s string) ([]aptSource, error) { return parseDeb822Sources(strings.NewReader(s)) },
		} {
			srcs, err := parse(in)
			if err != nil {
				continue
			}
			if u := pickMirror(srcs, "bookworm", true); u != "" && !strings.Contains(in, u) {
				t.Fatalf("mirror %q is not in the input", u)
			}
		}
		if pkgs, err := ParsePackages(strings.NewReader(in)); err == nil {
			for _, p := range pkgs {
				if p.Name == "" || p.Version == "" {
					t.Fatalf("package without name or version: %+v", p)
				}
			}
		}
	})
}
