package cli

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/allox-os/allox/images"
	"github.com/allox-os/allox/mkimage/internal/spec"
)

const modulePath = "github.com/allox-os/allox"

// loaded is a decoded spec with what a build needs to know about where it came from.
type loaded struct {
	img        *spec.Image
	text       []byte
	moduleRoot string
}

// load decodes the spec at path, or the embedded default when path is empty. Diagnostics are
// written to stderr with source snippets, all at once.
func load(c Context, path string) (*loaded, error) {
	var (
		text    []byte
		name    string
		baseDir string
		root    string
		err     error
	)
	if path == "" {
		if root, err = findModuleRoot("."); err != nil {
			return nil, err
		}
		text, name, baseDir = images.Default, filepath.Join("images", images.DefaultName), filepath.Join(root, "images")
	} else {
		if text, err = os.ReadFile(path); err != nil {
			return nil, fmt.Errorf("read spec: %w", err)
		}
		name, baseDir = path, filepath.Dir(path)
		if root, err = findModuleRoot(baseDir); err != nil {
			if root, err = findModuleRoot("."); err != nil {
				return nil, err
			}
		}
	}
	img, diags := spec.Parse(name, text, baseDir)
	if diags.HasErrors() {
		if err := spec.FormatDiagnostics(c.Stderr, name, text, diags); err != nil {
			return nil, err
		}
		fmt.Fprintf(c.Stderr, "%s: %d error(s)\n", name, len(diags.Errs()))
		return nil, errReported
	}
	return &loaded{img: img, text: text, moduleRoot: root}, nil
}

// findModuleRoot walks up from dir to the go.mod of the Allox module: mkimage builds the guest's Go
// binaries from that source tree.
func findModuleRoot(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for d := abs; ; d = filepath.Dir(d) {
		if isAlloxModule(filepath.Join(d, "go.mod")) {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no Allox checkout (go.mod of %s) above %s: run mkimage inside the source tree", modulePath, abs)
		}
	}
}

func isAlloxModule(gomod string) bool {
	f, err := os.Open(gomod)
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); strings.HasPrefix(line, "module ") {
			return strings.TrimSpace(strings.TrimPrefix(line, "module ")) == modulePath
		}
	}
	return false
}

// sourceDateEpoch reads SOURCE_DATE_EPOCH; unset means 0, so builds are reproducible by default.
func sourceDateEpoch() (int64, error) {
	v := os.Getenv("SOURCE_DATE_EPOCH")
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, errors.New("SOURCE_DATE_EPOCH must be a non-negative number of seconds, e.g. 1700000000")
	}
	return n, nil
}

func oneOptionalArg(args []string) (string, error) {
	switch len(args) {
	case 0:
		return "", nil
	case 1:
		return args[0], nil
	}
	return "", errUsage
}
