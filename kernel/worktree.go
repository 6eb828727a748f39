package kernel

import (
	"bytes"
	"context"
	"fmt"
	"github.com/allox-os/allox/internal/atomicfile"
	"hash"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// workTree is an extracted, patched source tree, made on demand and removed after the build.
type workTree struct {
	b    *Builder
	spec Spec
	in   *inputs
	dir  string // the source root, once prepared
	top  string // the temporary directory holding it
}

func (w *workTree) prepare(ctx context.Context) error {
	if w.dir != "" {
		return nil
	}
	tarball, err := w.spec.Source.Fetch(ctx, w.b.CacheDir)
	if err != nil {
		return err
	}
	work := filepath.Join(w.b.CacheDir, "kernel", "work")
	if err := os.MkdirAll(work, 0o755); err != nil {
		return err
	}
	if w.top, err = os.MkdirTemp(work, "tree-"); err != nil {
		return err
	}
	w.b.logf("kernel: extracting %s", w.spec.Source)
	if out, err := exec.CommandContext(ctx, "tar", "-xf", tarball, "-C", w.top).CombinedOutput(); err != nil {
		return fmt.Errorf("extract kernel source: %w: %s", err, out)
	}
	entries, err := os.ReadDir(w.top)
	if err != nil || len(entries) != 1 || !entries[0].IsDir() {
		return fmt.Errorf("kernel source %s must hold exactly one top-level directory", tarball)
	}
	w.dir = filepath.Join(w.top, entries[0].Name())
	w.b.logf("kernel: applying %d patch(es)", len(w.in.patches))
	return applyPatches(ctx, w.dir, w.in.patches)
}

func (w *workTree) remove() {
	if w.top != "" {
		os.RemoveAll(w.top)
	}
}

func (w *workTree) make(ctx context.Context, logTo io.Writer, args ...string) error {
	cmd := exec.CommandContext(ctx, "make", args...)
	cmd.Dir = w.dir
	cmd.Env = kbuildEnv(w.spec.Epoch, w.dir)
	var tail bytes.Buffer
	cmd.Stdout = io.MultiWriter(logTo, &tail)
	cmd.Stderr = cmd.Stdout
	if err := cmd.Run(); err != nil {
		lines := strings.Split(strings.TrimSpace(tail.String()), "\n")
		return fmt.Errorf("make %s: %w\n%s", strings.Join(args, " "), err, strings.Join(lines[max(0, len(lines)-40):], "\n"))
	}
	return nil
}

// configure writes the final .config: base, fragments, olddefconfig.
func (w *workTree) configure(ctx context.Context) ([]byte, error) {
	merged := filepath.Join(w.top, "fragments.config")
	var buf bytes.Buffer
	if err := Render(&buf, w.in.req.Settings()); err != nil {
		return nil, err
	}
	if err := os.WriteFile(merged, buf.Bytes(), 0o644); err != nil {
		return nil, err
	}
	cfg := filepath.Join(w.dir, ".config")
	switch base := w.spec.Base; {
	case base == "allnoconfig" || base == "alldefconfig" || base == "tinyconfig":
		if err := w.make(ctx, io.Discard, "KCONFIG_ALLCONFIG="+merged, base); err != nil {
			return nil, err
		}
	default:
		if base == "defconfig" {
			if err := w.make(ctx, io.Discard, "defconfig"); err != nil {
				return nil, err
			}
		} else if err := copyFile(base, cfg); err != nil {
			return nil, fmt.Errorf("base config: %w", err)
		}
		if err := appendFile(cfg, buf.Bytes()); err != nil {
			return nil, err
		}
	}
	if err := w.make(ctx, io.Discard, "olddefconfig"); err != nil {
		return nil, err
	}
	return os.ReadFile(cfg)
}

// finalConfig returns the proven final config, from the config cache when the inputs are unchanged.
func (b *Builder) finalConfig(ctx context.Context, w *workTree) ([]byte, error) {
	cached := filepath.Join(b.CacheDir, "kernel", "configs", w.in.digest+".config")
	if final, err := os.ReadFile(cached); err == nil {
		b.logf("kernel: config inputs unchanged, final config from cache")
		return final, nil
	}
	if err := w.prepare(ctx); err != nil {
		return nil, err
	}
	b.logf("kernel: configuring (%s + %d fragment(s))", w.spec.Base, len(w.spec.Fragments))
	final, err := w.configure(ctx)
	if err != nil {
		return nil, err
	}
	settings, err := ParseConfig(bytes.NewReader(final), ".config")
	if err != nil {
		return nil, err
	}
	var ex Explainer
	if k, kerr := ReadKconfig(w.dir, "x86"); kerr == nil {
		ex = k
		if err := b.saveSymbols(w, k); err != nil {
			return nil, err
		}
	}
	if err := Prove(w.in.req, ConfigOf(settings), w.in.allow, ex); err != nil {
		return nil, err
	}
	b.logf("kernel: proved %d requested option(s) in the final config", len(w.in.req.Settings()))
	return final, atomicWrite(cached, final)
}

// compile builds bzImage (and vmlinux) and moves them into the result directory.
func (b *Builder) compile(ctx context.Context, w *workTree, final []byte, res *Result) error {
	if err := w.prepare(ctx); err != nil {
		return err
	}
	cfg := filepath.Join(w.dir, ".config")
	if err := os.WriteFile(cfg, final, 0o644); err != nil {
		return err
	}
	logPath := filepath.Join(b.CacheDir, "kernel", "logs", res.Key+".log")
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return err
	}
	logf, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logf.Close()
	b.logf("kernel: compiling with %d job(s), log %s", jobs(w.spec.Jobs), logPath)
	start := time.Now()
	if err := w.make(ctx, logf, fmt.Sprintf("-j%d", jobs(w.spec.Jobs)), "bzImage"); err != nil {
		return err
	}
	if after, err := os.ReadFile(cfg); err != nil || !bytes.Equal(after, final) {
		return fmt.Errorf("BUG: the build changed the proven .config (see %s)", logPath)
	}
	tmp := res.Dir + ".tmp"
	os.RemoveAll(tmp)
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return err
	}
	for src, dst := range map[string]string{"arch/x86/boot/bzImage": "bzImage", "vmlinux": "vmlinux", ".config": "config"} {
		// Read-only: the output directory hard-links these files, and nothing may edit the cache.
		if err := copyFile(filepath.Join(w.dir, src), filepath.Join(tmp, dst)); err != nil {
			return err
		}
		if err := os.Chmod(filepath.Join(tmp, dst), 0o444); err != nil {
			return err
		}
	}
	meta := map[string]any{"key": res.Key, "source": w.spec.Source.String(), "source_sha256": w.spec.Source.SHA256,
		"toolchain": w.in.toolchain, "seconds": int(time.Since(start).Seconds()), "jobs": jobs(w.spec.Jobs)}
	if err := writeJSON(filepath.Join(tmp, "build.json"), meta); err != nil {
		return err
	}
	b.logf("kernel: built in %s", time.Since(start).Round(time.Second))
	return os.Rename(tmp, res.Dir)
}

// lock takes an exclusive lock on dir/.lock so two builds never share a cache entry half-written.
func lock(dir string) (func(), error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock kernel cache: %w", err)
	}
	return func() { f.Close() }, nil
}

func hashFileInto(h hash.Hash, p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(h, f)
	return err
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

func appendFile(p string, data []byte) error {
	f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func atomicWrite(p string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	return atomicfile.Write(p, data, 0o644)
}

func sortedCopy(s []string) []string {
	c := append([]string(nil), s...)
	sort.Strings(c)
	return c
}
