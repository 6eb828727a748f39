package rootfs

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestResolveSpec(t *testing.T) {
	got, err := resolveSpec(DebianSpec{Suite: "bookworm", Packages: []string{"busybox", "bubblewrap", "busybox", "btrfs-progs=6.2-1+deb12u2"}, Mirror: "http://mirror.example/debian"})
	if err != nil {
		t.Fatal(err)
	}
	want := DebianSpec{Suite: "bookworm", Packages: []string{"btrfs-progs=6.2-1+deb12u2", "bubblewrap", "busybox"}, Mirror: "http://mirror.example/debian", Arch: "amd64"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("resolveSpec (-want +got):\n%s", d)
	}

	_, err = resolveSpec(DebianSpec{Suite: "Bookworm!", Packages: []string{"ok", "Bad Name"}, Arch: "amd 64"})
	for _, w := range []string{`suite "Bookworm!"`, `packages[1] "Bad Name"`, `arch "amd 64"`} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("resolveSpec error %v lacks %q", err, w)
		}
	}
	if _, err := resolveSpec(DebianSpec{Suite: "bookworm", Packages: []string{"busybox"}, Mirror: "ftp://old/debian"}); err == nil || !strings.Contains(err.Error(), "Debian mirror, ending in /debian") {
		t.Errorf("ftp mirror: %v", err)
	}
	if _, err := resolveSpec(DebianSpec{Suite: "bookworm"}); err == nil || !strings.Contains(err.Error(), "packages is empty") {
		t.Errorf("no packages: %v", err)
	}
}

func TestCacheName(t *testing.T) {
	spec := func(pkgs ...string) DebianSpec {
		s, err := resolveSpec(DebianSpec{Suite: "bookworm", Packages: pkgs, Mirror: "http://mirror.example/debian"})
		must(t, err)
		return s
	}
	a, b := cacheName(spec("busybox", "bubblewrap")), cacheName(spec("bubblewrap", "busybox", "busybox"))
	if a != b {
		t.Errorf("package order changed the cache key: %s vs %s", a, b)
	}
	if !strings.HasPrefix(a, "debian-bookworm-amd64-") || len(a) != len("debian-bookworm-amd64-")+16 {
		t.Errorf("cache name %q", a)
	}
	if c := cacheName(spec("busybox")); c == a {
		t.Error("different packages, same cache key")
	}
	other := spec("busybox", "bubblewrap")
	other.Mirror = "http://other-mirror.example/debian"
	if cacheName(other) == a {
		t.Error("different mirror, same cache key")
	}
}

func TestMmdebstrapArgs(t *testing.T) {
	s, err := resolveSpec(DebianSpec{Suite: "bookworm", Packages: []string{"busybox", "bubblewrap"}, Mirror: "http://mirror.example/debian"})
	must(t, err)
	got := strings.Join(mmdebstrapArgs(s, "/h/setup.sh", "/h/extract.sh", "/o/rootfs.tar"), " ")
	for _, w := range []string{"--variant=extract", "--format=tar", "--architectures=amd64", "--include=bubblewrap,busybox",
		"--setup-hook=/h/setup.sh", "--extract-hook=/h/extract.sh", "bookworm /o/rootfs.tar http://mirror.example/debian"} {
		if !strings.Contains(got, w) {
			t.Errorf("mmdebstrap args %q lack %q", got, w)
		}
	}
}

func TestFetchWithoutMmdebstrap(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, _, err := Fetch(context.Background(), t.TempDir(), DebianSpec{Suite: "bookworm", Packages: []string{"busybox"}, Mirror: "http://mirror.example/debian"}, nil)
	if err == nil || !strings.Contains(err.Error(), "apt-get install mmdebstrap") {
		t.Errorf("Fetch = %v, want ErrNoMmdebstrap", err)
	}
}
