package rootfs

import (
	"bytes"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// DebianSpec names a Debian userland built from Debian packages only.
type DebianSpec struct {
	// Suite is a Debian codename, e.g. "bookworm".
	Suite string
	// Packages are installed with their dependencies, e.g. busybox, bubblewrap, btrfs-progs.
	Packages []string
	// Mirror is a Debian archive URL. Empty means the first Debian "main" source that apt on this
	// host uses, read from /etc/apt/sources.list and /etc/apt/sources.list.d.
	Mirror string
	// Arch is a Debian architecture; empty means "amd64".
	Arch string
}

// Package is one Debian package in a userland.
type Package struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	Arch    string `json:"arch"`
}

// recipeVersion names the way Fetch builds a userland; bump it when the mmdebstrap arguments change.
// The hook scripts are part of the cache key by their contents.
const recipeVersion = 1

//go:embed hooks/setup.sh
var setupHook []byte

//go:embed hooks/extract.sh
var extractHook []byte

// ErrNoMmdebstrap is returned (wrapped) by Fetch when mmdebstrap is not installed.
var ErrNoMmdebstrap = errors.New("mmdebstrap not found in PATH: apt-get install mmdebstrap")

var (
	suiteRE   = regexp.MustCompile(`^[a-z][a-z0-9.-]*$`)
	packageRE = regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]+(=[A-Za-z0-9.+~:-]+)?$`)
	archRE    = regexp.MustCompile(`^[a-z0-9][a-z0-9-]*$`)
)

// Fetch returns the path of a cached userland tarball for spec, building it with mmdebstrap when the
// cache has none, and the packages it holds. The cache key hashes the suite, the sorted packages, the
// mirror, the architecture and the recipe; a build is written to a temporary directory in cacheDir and
// renamed into place, so a tarball in the cache is always complete. mmdebstrap's output goes to log.
//
// The userland is mmdebstrap's extract variant: the named packages and their dependencies unpacked,
// without Essential packages and without maintainer scripts (see hooks/ for what stands in for them).
// SOURCE_DATE_EPOCH is passed on from the environment (0 when unset), so mtimes in the tarball are
// clamped and two builds from the same mirror state are identical.
func Fetch(ctx context.Context, cacheDir string, spec DebianSpec, log io.Writer) (tarball string, pkgs []Package, err error) {
	spec, err = resolveSpec(spec)
	if err != nil {
		return "", nil, err
	}
	base := filepath.Join(cacheDir, cacheName(spec))
	tarball, list := base+".tar", base+".packages.json"
	if pkgs, err := readPackageList(list); err == nil {
		if _, err := os.Stat(tarball); err == nil {
			return tarball, pkgs, nil
		}
	}
	if _, err := exec.LookPath("mmdebstrap"); err != nil {
		return "", nil, fmt.Errorf("fetch %s userland: %w", spec.Suite, ErrNoMmdebstrap)
	}
	if log == nil {
		log = io.Discard
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return "", nil, fmt.Errorf("fetch %s userland: %w", spec.Suite, err)
	}
	tmp, err := os.MkdirTemp(cacheDir, ".build-")
	if err != nil {
		return "", nil, fmt.Errorf("fetch %s userland: %w", spec.Suite, err)
	}
	defer os.RemoveAll(tmp)
	pkgs, err = build(ctx, tmp, spec, log)
	if err != nil {
		return "", nil, fmt.Errorf("fetch %s userland: %w", spec.Suite, err)
	}
	if err := commit(tmp, list, tarball, pkgs); err != nil {
		return "", nil, fmt.Errorf("fetch %s userland: %w", spec.Suite, err)
	}
	return tarball, pkgs, nil
}

// resolveSpec validates spec and fills in the defaults: arch, mirror, sorted unique packages.
func resolveSpec(spec DebianSpec) (DebianSpec, error) {
	var errs []error
	if !suiteRE.MatchString(spec.Suite) {
		errs = append(errs, fmt.Errorf("suite %q: want a Debian codename such as \"bookworm\"", spec.Suite))
	}
	if spec.Arch == "" {
		spec.Arch = "amd64"
	}
	if !archRE.MatchString(spec.Arch) {
		errs = append(errs, fmt.Errorf("arch %q: want a Debian architecture such as \"amd64\"", spec.Arch))
	}
	if len(spec.Packages) == 0 {
		errs = append(errs, errors.New("packages is empty: name at least one, e.g. \"busybox\""))
	}
	for i, p := range spec.Packages {
		if !packageRE.MatchString(p) {
			errs = append(errs, fmt.Errorf("packages[%d] %q: want a Debian package name, optionally =version", i, p))
		}
	}
	pkgs := slices.Clone(spec.Packages)
	slices.Sort(pkgs)
	spec.Packages = slices.Compact(pkgs)
	if len(errs) > 0 {
		return spec, errors.Join(errs...)
	}
	if spec.Mirror == "" {
		m, err := HostMirror("/etc/apt", spec.Suite)
		if err != nil {
			return spec, err
		}
		spec.Mirror = m
	}
	if u, err := url.Parse(spec.Mirror); err != nil || (u.Scheme != "http" && u.Scheme != "https" && u.Scheme != "file") || strings.ContainsAny(spec.Mirror, " \t\n") {
		return spec, fmt.Errorf("mirror %q: want the http, https or file URL of a Debian mirror, ending in /debian", spec.Mirror)
	}
	return spec, nil
}

// cacheName is the file name (without extension) of spec's tarball in the cache.
func cacheName(spec DebianSpec) string {
	key, err := json.Marshal(struct {
		Recipe   int
		Setup    []byte
		Extract  []byte
		Suite    string
		Packages []string
		Mirror   string
		Arch     string
	}{recipeVersion, setupHook, extractHook, spec.Suite, spec.Packages, strings.TrimSuffix(spec.Mirror, "/"), spec.Arch})
	if err != nil {
		panic(fmt.Sprintf("BUG: marshal cache key: %v", err))
	}
	sum := sha256.Sum256(key)
	return fmt.Sprintf("debian-%s-%s-%s", spec.Suite, spec.Arch, hex.EncodeToString(sum[:8]))
}

// build runs mmdebstrap into dir/rootfs.tar and returns the packages it used.
func build(ctx context.Context, dir string, spec DebianSpec, log io.Writer) ([]Package, error) {
	setup, extract := filepath.Join(dir, "setup.sh"), filepath.Join(dir, "extract.sh")
	if err := os.WriteFile(setup, setupHook, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(extract, extractHook, 0o755); err != nil {
		return nil, err
	}
	list := filepath.Join(dir, "packages")
	args := mmdebstrapArgs(spec, setup, extract, filepath.Join(dir, "rootfs.tar"))
	env := []string{"ALLOX_ARCH=" + spec.Arch, "ALLOX_PACKAGES=" + list, "SOURCE_DATE_EPOCH=" + sourceDateEpoch()}
	fmt.Fprintf(log, "+ %s mmdebstrap %s\n", strings.Join(env, " "), shellJoin(args))
	cmd := exec.CommandContext(ctx, "mmdebstrap", args...)
	cmd.Env = append(os.Environ(), env...)
	tail := &tailBuffer{max: 4096}
	cmd.Stdout = io.MultiWriter(log, tail)
	cmd.Stderr = cmd.Stdout
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("mmdebstrap: %w\n%s", err, tail.String())
	}
	f, err := os.Open(list)
	if err != nil {
		return nil, fmt.Errorf("BUG: the extract hook wrote no package list: %w", err)
	}
	defer f.Close()
	return ParsePackages(f)
}

func mmdebstrapArgs(spec DebianSpec, setup, extract, out string) []string {
	mode := "root"
	if os.Geteuid() != 0 {
		mode = "unshare"
	}
	return []string{
		"--variant=extract",
		"--mode=" + mode,
		"--format=tar",
		"--architectures=" + spec.Arch,
		"--include=" + strings.Join(spec.Packages, ","),
		"--setup-hook=" + setup,
		"--extract-hook=" + extract,
		spec.Suite, out, spec.Mirror,
	}
}

func sourceDateEpoch() string {
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		return s
	}
	return "0"
}

// commit moves a finished build into the cache: the package list first, the tarball last, so that a
// tarball is only ever found next to its list.
func commit(dir, list, tarball string, pkgs []Package) error {
	b, err := json.MarshalIndent(pkgs, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "packages.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	if err := os.Rename(filepath.Join(dir, "packages.json"), list); err != nil {
		return err
	}
	return os.Rename(filepath.Join(dir, "rootfs.tar"), tarball)
}

func readPackageList(file string) ([]Package, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var pkgs []Package
	if err := json.Unmarshal(b, &pkgs); err != nil {
		return nil, fmt.Errorf("%s: %w (delete it to rebuild)", file, err)
	}
	return pkgs, nil
}

// tailBuffer keeps the last max bytes written to it, for error messages.
type tailBuffer struct {
	max int
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = t.buf[over:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string { return string(bytes.TrimSpace(t.buf)) }

// shellJoin quotes args for a command line that can be pasted into a shell.
func shellJoin(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		if a != "" && strings.Trim(a, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_=+,./:@") == "" {
			q[i] = a
		} else {
			q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(q, " ")
}
