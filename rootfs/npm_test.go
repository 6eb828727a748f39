package rootfs

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/allox-os/allox/internal/testenv"
)

// The wrapper package of opencode: small, and its integrity as the registry publishes it.
var smallNpm = NpmPackage{Package: "opencode-ai", Version: "1.18.33",
	Integrity: "sha512-58P1ffLRXiAY4QeoABqUjqf6DEzm1ihpovvn9Ad+oOLbLiwK/rf88wruT9IATJ7AtNjmi8iA7pC8tN4o5y799Q==",
	Files:     []string{"bin/opencode.exe"}}

// Fetched through the npm client, checked against the pinned integrity, extracted; the second
// fetch asks the registry nothing (no npm on PATH) and gives the same bytes.
func TestFetchNpmCachedByIntegrity(t *testing.T) {
	testenv.Tool(t, "npm", "apt-get install npm")
	cache := t.TempDir()
	dir, tarball, err := FetchNpm(t.Context(), cache, smallNpm, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	first, err := os.ReadFile(filepath.Join(dir, "bin/opencode.exe"))
	if err != nil || len(first) == 0 {
		t.Fatalf("extracted file: %v", err)
	}
	if st, err := os.Stat(filepath.Join(dir, "bin/opencode.exe")); err != nil || st.Mode().Perm()&0o111 == 0 {
		t.Errorf("extracted file not executable: %v %v", st, err)
	}
	if !strings.HasPrefix(filepath.Base(tarball), "e7c3f57d") {
		t.Errorf("tarball %s is not keyed by the integrity's sha512", tarball)
	}
	t.Setenv("PATH", t.TempDir())
	dir2, _, err := FetchNpm(t.Context(), cache, smallNpm, io.Discard)
	if err != nil || dir2 != dir {
		t.Fatalf("second fetch without npm: %s, %v", dir2, err)
	}
}

// A pinned integrity the registry's tarball does not have is refused, naming both, and nothing
// lands in the cache.
func TestFetchNpmWrongIntegrity(t *testing.T) {
	testenv.Tool(t, "npm", "apt-get install npm")
	cache := t.TempDir()
	p := smallNpm
	p.Integrity = "sha512-l66NZkQgdk2C3pbcfULDz42yEUB581MVA6I+Y43Wp4OIqEy73HCdmZ0GTjeAHY2ycuH4N00d9VsLrwT1jxshTw=="
	_, _, err := FetchNpm(t.Context(), cache, p, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "the registry's tarball has integrity "+smallNpm.Integrity) || !strings.Contains(err.Error(), "the spec pins "+p.Integrity) {
		t.Fatalf("err %v, want the mismatch named", err)
	}
	if got, _ := filepath.Glob(filepath.Join(cache, "npm", "*.tgz")); len(got) != 0 {
		t.Errorf("a refused tarball was kept: %v", got)
	}
}

// A file the package does not have is refused with the package's executables listed.
func TestFetchNpmMissingFile(t *testing.T) {
	testenv.Tool(t, "npm", "apt-get install npm")
	p := smallNpm
	p.Files = []string{"bin/opencode"}
	_, _, err := FetchNpm(t.Context(), t.TempDir(), p, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "has no file bin/opencode; its executable files are") || !strings.Contains(err.Error(), "bin/opencode.exe") {
		t.Fatalf("err %v", err)
	}
}
