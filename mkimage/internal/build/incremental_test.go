package build

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/allox-os/allox/internal/artifact"
	"github.com/allox-os/allox/kernel"
)

// outputID is one output file as a rebuild must leave it when it has nothing to do: the same bytes
// in the same inode, never rewritten (the ctime of a file with other hard links, the kernel's
// artifacts linked from the shared cache, moves with every link made elsewhere: it is not kept).
type outputID struct {
	SHA256       string
	Ino, CtimeNs int64
}

// snapshotOutputs records every file of out (the manifest and the hidden state included).
func snapshotOutputs(t *testing.T, out string) map[string]outputID {
	t.Helper()
	ids := map[string]outputID{}
	err := filepath.WalkDir(out, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		sum, err := kernel.HashFile(p)
		if err != nil {
			return err
		}
		var st syscall.Stat_t
		if err := syscall.Stat(p, &st); err != nil {
			return err
		}
		id := outputID{SHA256: sum, Ino: int64(st.Ino)}
		if st.Nlink == 1 {
			id.CtimeNs = st.Ctim.Nano()
		}
		ids[rel(out, p)] = id
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

func sums(ids map[string]outputID) map[string]string {
	m := map[string]string{}
	for p, id := range ids {
		m[p] = id.SHA256
	}
	return m
}

// ranStages lists the stages that did their work.
func ranStages(res *Result) []string {
	var ran []string
	for _, st := range stages {
		if res.Stages[st.name].Ran {
			ran = append(ran, st.name)
		}
	}
	return ran
}

// copyModule copies the Go sources the image's binaries are built from into a scratch module, so
// that a test can edit them.
func copyModule(t *testing.T) string {
	t.Helper()
	root, _ := filepath.Abs("../../..")
	dst := t.TempDir()
	for _, p := range []string{"go.mod", "go.sum", "init", "internal", "services"} {
		if out, err := exec.Command("cp", "-a", filepath.Join(root, p), dst).CombinedOutput(); err != nil {
			t.Fatalf("copy %s: %v\n%s", p, err, out)
		}
	}
	return dst
}

// scratchCache is a cache directory with the kernel and the userland of the real one (linked) and
// an empty Go binary cache, so that every binary's first build in a test compiles.
func scratchCache(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	entries, err := os.ReadDir(artifact.CacheDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != goBinaryCache {
			if err := os.Symlink(filepath.Join(artifact.CacheDir(), e.Name()), filepath.Join(dir, e.Name())); err != nil {
				t.Fatal(err)
			}
		}
	}
	return dir
}

func TestNoOpRebuildReusesEverything(t *testing.T) {
	root, _ := filepath.Abs("../../..")
	out := t.TempDir()
	buildDefaultInto(t, root, out)
	before := snapshotOutputs(t, out)
	res, progress := buildDefaultInto(t, root, out)
	if ran := ranStages(res); len(ran) > 0 {
		t.Errorf("a rebuild with nothing changed ran %v:\n%s", ran, progress)
	}
	after := snapshotOutputs(t, out)
	delete(before, StateName) // the state is rewritten (with the same content)
	delete(after, StateName)
	if diff := cmp.Diff(before, after); diff != "" {
		t.Errorf("a no-op rebuild changed or rewrote outputs (-before +after):\n%s", diff)
	}
	for _, st := range stages {
		if !strings.Contains(progress, "    "+st.name+" in ") || res.Stages[st.name].Why == "" {
			t.Errorf("stage %q: the progress does not say why it was reused:\n%s", st.name, progress)
		}
	}
}

// downstreamOfBinary are the stages an edit of one service's Go source must run, in order.
var downstreamOfBinary = []string{"go binaries", "stage rootfs", "rootfs disk image", "nvdimm dax header",
	"initramfs", "kata drop-ins", "kata contract check", "provenance manifest"}

func TestEditOfOneServiceRebuildsItsBinaryAndTheImages(t *testing.T) {
	mod, cache := copyModule(t), scratchCache(t)
	out := t.TempDir()
	buildDefaultWith(t, mod, out, cache)
	original := snapshotOutputs(t, out)

	edit := filepath.Join(mod, "services", "allox", "zz_edit.go")
	if err := os.WriteFile(edit, []byte("package main\n\nimport \"os\"\n\nvar edited = os.Getpid()\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	res, progress := buildDefaultWith(t, mod, out, cache)
	if diff := cmp.Diff(downstreamOfBinary, ranStages(res)); diff != "" {
		t.Errorf("stages that ran after editing services/allox (-want +got):\n%s\n%s", diff, progress)
	}
	why := res.Stages["go binaries"].Why
	if !strings.Contains(why, "rebuilt /usr/libexec/allox/allox (changed: services/allox)") || !strings.Contains(why, "reused 2") {
		t.Errorf("go binaries: want exactly the client rebuilt, naming its changed package; got %q", why)
	}
	for _, name := range []string{"stage rootfs", "rootfs disk image", "initramfs"} {
		if w := res.Stages[name].Why; !strings.Contains(w, "binary /usr/libexec/allox/allox") {
			t.Errorf("%s: want the changed binary named as the reason, got %q", name, w)
		}
	}
	edited := sums(snapshotOutputs(t, out))
	for _, name := range []string{artifact.Rootfs, artifact.Initramfs} {
		if edited[name] == original[name].SHA256 {
			t.Errorf("%s is unchanged although a binary in it changed", name)
		}
	}

	// Undoing the edit brings back the first build's binary from the cache and the first build's
	// bytes, without compiling.
	if err := os.Remove(edit); err != nil {
		t.Fatal(err)
	}
	res, progress = buildDefaultWith(t, mod, out, cache)
	if res.Stages["go binaries"].Ran {
		t.Errorf("undoing the edit recompiled: %s", res.Stages["go binaries"].Why)
	}
	reverted := sums(snapshotOutputs(t, out))
	delete(reverted, StateName)
	want := sums(original)
	delete(want, StateName)
	if diff := cmp.Diff(want, reverted); diff != "" {
		t.Errorf("outputs after undoing the edit differ from the first build's (-first +now):\n%s\n%s", diff, progress)
	}
}

// An output changed behind the build's back (here the initramfs, truncated) is written again, and
// only what depends on it runs; the other outputs keep their inodes.
func TestTamperedOutputIsRewritten(t *testing.T) {
	root, _ := filepath.Abs("../../..")
	out := t.TempDir()
	buildDefaultInto(t, root, out)
	before := snapshotOutputs(t, out)
	p := filepath.Join(out, artifact.Initramfs)
	if err := os.Truncate(p, 1000); err != nil {
		t.Fatal(err)
	}
	res, progress := buildDefaultInto(t, root, out)
	want := []string{"stage rootfs", "initramfs"} // the same bytes again: the checks keyed by them are not rerun
	if diff := cmp.Diff(want, ranStages(res)); diff != "" {
		t.Errorf("stages that ran after the initramfs was truncated (-want +got):\n%s\n%s", diff, progress)
	}
	after := snapshotOutputs(t, out)
	if after[artifact.Initramfs].SHA256 != before[artifact.Initramfs].SHA256 {
		t.Errorf("the rewritten initramfs differs from the one first built")
	}
	for _, name := range []string{artifact.Rootfs, artifact.Kernel, artifact.Boot, artifact.Manifest} {
		if after[name] != before[name] {
			t.Errorf("%s was rewritten although nothing it depends on changed: %+v -> %+v", name, before[name], after[name])
		}
	}
}

// The hash cache is keyed by the file's stamp: an edit that keeps the size and puts the old mtime
// back is still seen (the kernel moves ctime, which no one can set).
func TestHashCacheSeesAnEditThatRestoresTheMtime(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, []byte("aaaa"), 0o644); err != nil {
		t.Fatal(err)
	}
	h := newHashes(map[string]fileStamp{})
	first, err := h.sum(p)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("bbbb"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(p, st.ModTime(), st.ModTime()); err != nil {
		t.Fatal(err)
	}
	second, err := h.sum(p)
	if err != nil {
		t.Fatal(err)
	}
	if first == second {
		t.Fatalf("the cache returned the old sha256 %s after the content changed", first)
	}
	if want := sha256Hex([]byte("bbbb")); second != want {
		t.Errorf("sum = %s, want %s", second, want)
	}
	if !h.unchanged(p) {
		t.Error("a file just hashed is reported changed")
	}
}

// A package of the checkout is keyed by its files' names and contents, those a build constraint
// leaves out included; a standard or module-cache package by its name and version only.
func TestPackageDigest(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a.go", "package a")
	write("b_other.go", "//go:build never\npackage a")
	local := func() *goPackage {
		return &goPackage{ImportPath: modulePath + "/a", Dir: dir, GoFiles: []string{"a.go"},
			IgnoredGoFiles: []string{"b_other.go"}, Module: &goListModule{Path: modulePath, Main: true}}
	}
	base, err := packageDigest(local())
	if err != nil {
		t.Fatal(err)
	}
	write("b_other.go", "//go:build linux\npackage a")
	edited, err := packageDigest(local())
	if err != nil {
		t.Fatal(err)
	}
	if base == edited {
		t.Error("editing a file a build constraint leaves out did not change the package's digest")
	}
	for _, tc := range []struct {
		name string
		pkg  *goPackage
		want string
	}{
		{"standard", &goPackage{ImportPath: "os", Standard: true}, "std"},
		{"module cache", &goPackage{ImportPath: "golang.org/x/sys/unix", Module: &goListModule{Path: "golang.org/x/sys", Version: "v0.1.0"}}, "module golang.org/x/sys@v0.1.0"},
		{"unlistable", &goPackage{ImportPath: "x", Error: &struct{ Err string }{"no such package"}}, ""},
	} {
		got, err := packageDigest(tc.pkg)
		if err != nil || got != tc.want {
			t.Errorf("%s: digest %q (%v), want %q", tc.name, got, err, tc.want)
		}
	}
	// A module replaced by a directory is keyed by its files, like the checkout.
	replaced := local()
	replaced.Module = &goListModule{Path: "example.com/m", Version: "v1.0.0", Replace: &goListModule{Path: "../m"}}
	if d, err := packageDigest(replaced); err != nil || !strings.HasPrefix(d, "files ") {
		t.Errorf("replaced by a directory: digest %q (%v), want one over its files", d, err)
	}
}

func TestChangedPackages(t *testing.T) {
	old := map[string]string{modulePath + "/a": "1", modulePath + "/b": "1", "os": "std"}
	cur := map[string]string{modulePath + "/a": "2", modulePath + "/c": "1", "os": "std"}
	got := changedPackages(old, cur)
	want := "a, b (no longer linked), c"
	if got != want {
		t.Errorf("changedPackages = %q, want %q", got, want)
	}
	if got := changedPackages(cur, cur); got != "" {
		t.Errorf("no change: %q", got)
	}
}
