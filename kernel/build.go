package kernel

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// recipe changes whenever the way we configure or build changes, invalidating cached builds.
const recipe = "allox-kernel-recipe-3"

// Spec is everything that determines the kernel.
type Spec struct {
	Source    Source
	Base      string   // allnoconfig, alldefconfig, defconfig, or the path of a base config file
	Fragments []string // in order
	Series    string   // patch series file, "" for none
	Allowlist string   // "" for none
	Parity    *Parity  // nil: no parity proof against Kata's kernel
	Epoch     int64    // build timestamp (SOURCE_DATE_EPOCH)
	Jobs      int      // 0 = number of CPUs
}

// Result is a built (or cached) kernel.
type Result struct {
	Dir       string        // holds bzImage, vmlinux, config, build.json
	Key       string        // the build key: source, final config, patches, toolchain
	Cached    bool          // no compilation happened
	Requested int           // symbols the fragments request (all proven)
	Parity    *ParityReport // how the final config stands against Kata's, when the spec asks
}

// Paths of the artifacts in a result directory.
func (r *Result) BzImage() string { return filepath.Join(r.Dir, "bzImage") }
func (r *Result) Vmlinux() string { return filepath.Join(r.Dir, "vmlinux") }
func (r *Result) Config() string  { return filepath.Join(r.Dir, "config") }

// Builder builds kernels into a cache directory. Log receives progress lines.
type Builder struct {
	CacheDir string
	Log      io.Writer
}

func (b *Builder) logf(format string, args ...any) {
	if b.Log != nil {
		fmt.Fprintf(b.Log, format+"\n", args...)
	}
}

// Build resolves the final config (proving every request) and returns the cached build for it,
// compiling only when no build with the same key exists.
func (b *Builder) Build(ctx context.Context, spec Spec) (res *Result, err error) {
	err = b.withFinalConfig(ctx, spec, func(w *workTree, final []byte, parity *ParityReport) error {
		res = &Result{Key: buildKey(w.in, final, spec.Epoch), Requested: len(w.in.req.Settings()), Parity: parity}
		res.Dir = filepath.Join(b.CacheDir, "kernel", "builds", res.Key)
		if complete(res) {
			res.Cached = true
			return nil
		}
		return b.compile(ctx, w, final, res)
	})
	return res, err
}

// FinalConfig returns the proven final .config for spec without compiling: every requested symbol
// has its value or the error says which did not, where it was asked for and why.
func (b *Builder) FinalConfig(ctx context.Context, spec Spec) (final []byte, parity *ParityReport, err error) {
	err = b.withFinalConfig(ctx, spec, func(_ *workTree, f []byte, p *ParityReport) error {
		final, parity = f, p
		return nil
	})
	return final, parity, err
}

// withFinalConfig holds the cache lock while it proves the final config (and its parity with Kata's
// when the spec asks) and hands it to fn with the work tree (prepared only if configuring or reading
// Kconfig needed it), removing the tree afterwards.
func (b *Builder) withFinalConfig(ctx context.Context, spec Spec, fn func(w *workTree, final []byte, parity *ParityReport) error) error {
	inputs, err := readInputs(spec)
	if err != nil {
		return err
	}
	unlock, err := lock(filepath.Join(b.CacheDir, "kernel"))
	if err != nil {
		return err
	}
	defer unlock()
	w := &workTree{b: b, spec: spec, in: inputs}
	defer w.remove()
	final, err := b.finalConfig(ctx, w)
	if err != nil {
		return err
	}
	parity, err := b.proveParity(ctx, w, final)
	if err != nil {
		return err
	}
	return fn(w, final, parity)
}

// Cached reports whether a finished build for spec is in the cache, without configuring or
// compiling anything: it answers only when the config inputs were proven before.
func (b *Builder) Cached(spec Spec) (*Result, bool) {
	in, err := readInputs(spec)
	if err != nil {
		return nil, false
	}
	final, err := os.ReadFile(filepath.Join(b.CacheDir, "kernel", "configs", in.digest+".config"))
	if err != nil {
		return nil, false
	}
	res := &Result{Key: buildKey(in, final, spec.Epoch), Requested: len(in.req.Settings()), Cached: true}
	res.Dir = filepath.Join(b.CacheDir, "kernel", "builds", res.Key)
	return res, complete(res)
}

// inputs are the parsed, hashed inputs of a build.
type inputs struct {
	req       *Requests
	allow     Allowlist
	patches   []Patch
	parity    *parityInputs // nil without a parity proof
	toolchain string
	digest    string // hash of everything that determines the final config
	tree      string // hash of the patched source tree (what its Kconfig declares)
}

func readInputs(spec Spec) (*inputs, error) {
	in := &inputs{allow: Allowlist{}}
	var err error
	if in.req, err = MergeFragments(spec.Fragments); err != nil {
		return nil, err
	}
	if spec.Allowlist != "" {
		f, err := os.Open(spec.Allowlist)
		if err != nil {
			return nil, fmt.Errorf("read allow-list: %w", err)
		}
		in.allow, err = ParseAllowlist(f, spec.Allowlist)
		f.Close()
		if err != nil {
			return nil, err
		}
	}
	if in.patches, err = ReadSeries(spec.Series); err != nil {
		return nil, err
	}
	if in.parity, err = readParity(spec.Parity); err != nil {
		return nil, err
	}
	if in.toolchain, err = Toolchain(); err != nil {
		return nil, err
	}
	t := sha256.New()
	fmt.Fprintf(t, "source %s\n", spec.Source.SHA256)
	for _, p := range in.patches {
		fmt.Fprintf(t, "patch %s\n", p.Name)
		if err := hashFileInto(t, p.Path); err != nil {
			return nil, err
		}
	}
	in.tree = hex.EncodeToString(t.Sum(nil))
	h := sha256.New()
	fmt.Fprintf(h, "%s\nsource %s\nbase %s\ntoolchain %s\n", recipe, spec.Source.SHA256, spec.Base, in.toolchain)
	if !isTarget(spec.Base) {
		if err := hashFileInto(h, spec.Base); err != nil {
			return nil, fmt.Errorf("read base config: %w", err)
		}
	}
	if err := Render(h, in.req.Settings()); err != nil {
		return nil, err
	}
	for _, p := range in.patches {
		fmt.Fprintf(h, "patch %s\n", p.Name)
		if err := hashFileInto(h, p.Path); err != nil {
			return nil, err
		}
	}
	fmt.Fprintf(h, "allow %v\n", sortedKeys(in.allow))
	in.digest = hex.EncodeToString(h.Sum(nil))
	return in, nil
}

func buildKey(in *inputs, final []byte, epoch int64) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\nconfig-inputs %s\nepoch %d\nuser allox host allox\n", recipe, in.digest, epoch)
	h.Write(final)
	return hex.EncodeToString(h.Sum(nil))
}

func complete(r *Result) bool {
	for _, p := range []string{r.BzImage(), r.Vmlinux(), r.Config()} {
		if _, err := os.Stat(p); err != nil {
			return false
		}
	}
	return true
}

// Toolchain identifies the compiler, linker and pahole (which writes BTF): a change rebuilds.
func Toolchain() (string, error) {
	var parts []string
	for _, argv := range [][]string{{"gcc", "--version"}, {"ld", "--version"}, {"pahole", "--version"}} {
		out, err := exec.Command(argv[0], argv[1:]...).Output()
		if err != nil {
			return "", fmt.Errorf("%s is needed to build the kernel: %w (run ci/deps.sh)", argv[0], err)
		}
		first, _, _ := strings.Cut(string(out), "\n")
		parts = append(parts, strings.TrimSpace(first))
	}
	return strings.Join(parts, "; "), nil
}

func isTarget(base string) bool {
	switch base {
	case "allnoconfig", "alldefconfig", "defconfig", "tinyconfig":
		return true
	}
	return false
}

func jobs(n int) int {
	if n > 0 {
		return n
	}
	return runtime.NumCPU()
}

// kbuildEnv makes the build independent of who builds it, where and when. The source tree lives under the
// cache directory, so its path is mapped away (-ffile-prefix-map) or vmlinux's DWARF would name it. A set
// KBUILD_BUILD_TIMESTAMP also keeps pahole older than 1.27 single-threaded (scripts/Makefile.btf), which is
// what makes BTF reproducible.
func kbuildEnv(epoch int64, srcdir string) []string {
	ts := time.Unix(epoch, 0).UTC().Format("Mon Jan _2 15:04:05 UTC 2006")
	// No trailing slash: DWARF's compile directory is srcdir itself, which "srcdir/=" never matched
	// (make repro-kernel found the tree's path in .debug_str and .debug_line_str, and so in the
	// build id that bzImage carries).
	prefixMap := "-ffile-prefix-map=" + srcdir + "=."
	var env []string
	for _, kv := range os.Environ() {
		switch k, _, _ := strings.Cut(kv, "="); k {
		case "KCFLAGS", "KAFLAGS", "KCPPFLAGS", "KBUILD_BUILD_TIMESTAMP", "KBUILD_BUILD_USER",
			"KBUILD_BUILD_HOST", "KBUILD_BUILD_VERSION", "LC_ALL", "TZ", "SOURCE_DATE_EPOCH":
			continue // ours below; an inherited one would make the build depend on the caller
		}
		env = append(env, kv)
	}
	return append(env, "KBUILD_BUILD_TIMESTAMP="+ts, "KBUILD_BUILD_USER=allox",
		"KBUILD_BUILD_HOST=allox", "KBUILD_BUILD_VERSION=1", "LC_ALL=C", "TZ=UTC",
		"KCFLAGS="+prefixMap, "KAFLAGS="+prefixMap, "SOURCE_DATE_EPOCH="+strconv.FormatInt(epoch, 10))
}

func writeJSON(path string, v any) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}
