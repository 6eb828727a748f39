package kernel

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/allox-os/allox/internal/artifact"
)

// The pinned source of the default spec (images/allox.hcl).
var defaultSource = Source{
	DebianPackage: "linux-source-6.12",
	Version:       "6.12.117-1~deb12u1",
	SHA256:        "585a4a074597aefa2b1a68ada83a3184ba351c127544dea80618bbcceaa3961f",
}

// realBuilder returns a builder with an empty cache except for the shared source tarballs, so
// configuration really runs against the pinned kernel source.
func realBuilder(t *testing.T) *Builder {
	t.Helper()
	if testing.Short() {
		t.Skip("configures the real kernel source (about a minute); run without -short")
	}
	shared := filepath.Join(artifact.CacheDir(), "sources")
	if err := os.MkdirAll(shared, 0o755); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.Symlink(shared, filepath.Join(dir, "sources")); err != nil {
		t.Fatal(err)
	}
	return &Builder{CacheDir: dir, Log: testLog{t}}
}

type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func writeFile(t *testing.T, dir, name, text string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestRealFragmentsProve(t *testing.T) {
	b := realBuilder(t)
	frags, err := filepath.Glob("fragments/*.conf")
	if err != nil || len(frags) == 0 {
		t.Fatalf("no fragments: %v", err)
	}
	spec := Spec{Source: defaultSource, Base: "allnoconfig", Fragments: frags, Series: "patches/series", Allowlist: "allowlist",
		Parity: &Parity{Symbols: "kata/kata-4.1.0-x86_64.conf", Allowlist: "kata/parity-allowlist"}}
	final, parity, err := b.FinalConfig(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if parity == nil || parity.Matched == 0 || parity.Matched+sum(parity.ByCategory) != parity.Total {
		t.Errorf("parity report %+v: want every Kata symbol matched or allow-listed", parity)
	}
	t.Log(parity)
	for _, want := range []string{"CONFIG_DEBUG_INFO_BTF=y", "CONFIG_BTRFS_FS=y", "CONFIG_IKCONFIG_PROC=y", "# CONFIG_MODULES is not set",
		"CONFIG_SCSI_VIRTIO=y", "CONFIG_BLK_DEV_SD=y", "CONFIG_ACPI_HOTPLUG_CPU=y", "CONFIG_VIRTIO_MEM=y", "CONFIG_SECURITY_LANDLOCK=y"} {
		if !strings.Contains(string(final), want+"\n") {
			t.Errorf("final config lacks %q", want)
		}
	}
	// The second call must come from the config cache: no source tree is extracted.
	b.Log = nil
	if _, _, err := b.FinalConfig(context.Background(), spec); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(filepath.Join(b.CacheDir, "kernel", "work")); len(entries) != 0 {
		t.Errorf("work trees left behind: %v", entries)
	}
}

func TestRealUnsatisfiableFragmentFails(t *testing.T) {
	b := realBuilder(t)
	dir := t.TempDir()
	frag := writeFile(t, dir, "erofs.conf", "# EROFS sits inside the MISC_FILESYSTEMS menu\nCONFIG_BLOCK=y\nCONFIG_EROFS_FS=y\n")
	_, _, err := b.FinalConfig(context.Background(), Spec{Source: defaultSource, Base: "allnoconfig", Fragments: []string{frag}})
	want := frag + ":3: CONFIG_EROFS_FS requested y, final .config has it not set; unmet depends on: MISC_FILESYSTEMS [=n]"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("error = %v\nwant it to contain %q", err, want)
	}
}

func TestRealPatchThatDoesNotApplyFails(t *testing.T) {
	b := realBuilder(t)
	dir := t.TempDir()
	writeFile(t, dir, "0001-bogus.patch", "--- a/Makefile\n+++ b/Makefile\n@@ -1,1 +1,1 @@\n-this line is not in the kernel Makefile\n+neither is this\n")
	series := writeFile(t, dir, "series", "# our patches\n0001-bogus.patch\n")
	frag := writeFile(t, dir, "f.conf", "CONFIG_BLOCK=y\n")
	_, _, err := b.FinalConfig(context.Background(), Spec{Source: defaultSource, Base: "allnoconfig", Fragments: []string{frag}, Series: series})
	if err == nil || !strings.Contains(err.Error(), "patch 0001-bogus.patch (series line 2) does not apply") {
		t.Fatalf("error = %v, want the failing patch named", err)
	}
}

func TestSourceHashMismatch(t *testing.T) {
	dir := t.TempDir()
	tarball := writeFile(t, dir, "linux.tar.xz", "not really a kernel")
	src := Source{Tarball: tarball, SHA256: strings.Repeat("0", 64)}
	_, err := src.Fetch(context.Background(), dir)
	if err == nil || !strings.Contains(err.Error(), "the spec pins "+strings.Repeat("0", 64)) {
		t.Fatalf("error = %v, want a hash mismatch naming the pinned hash", err)
	}
}

// TestKbuildEnvMapsSourceDir checks the build environment that makes two builds in different
// directories identical: the tree's path is mapped away without a trailing slash (DWARF's compile
// directory is the tree itself), and the caller's own flags never leak in.
func TestKbuildEnvMapsSourceDir(t *testing.T) {
	t.Setenv("KCFLAGS", "-O0")
	env := kbuildEnv(0, "/cache/kernel/work/tree-1/linux")
	want := []string{"KCFLAGS=-ffile-prefix-map=/cache/kernel/work/tree-1/linux=.",
		"KAFLAGS=-ffile-prefix-map=/cache/kernel/work/tree-1/linux=.", "KBUILD_BUILD_VERSION=1",
		"KBUILD_BUILD_USER=allox", "KBUILD_BUILD_HOST=allox", "SOURCE_DATE_EPOCH=0"}
	for _, w := range want {
		if !slices.Contains(env, w) {
			t.Errorf("kbuildEnv lacks %q", w)
		}
	}
	if slices.Contains(env, "KCFLAGS=-O0") {
		t.Error("the caller's KCFLAGS leaked into the kernel build")
	}
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
