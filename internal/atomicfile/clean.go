package atomicfile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
)

// RemoveTemps removes the temporary files a Write killed half-way left in dir (".<name>.tmp-*")
// and returns their names. Call it only while no Write into dir can be in flight, e.g. at start-up
// under the owner's lock. A missing dir has none.
func RemoveTemps(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	for _, e := range ents {
		if !IsTemp(e.Name()) || !e.Type().IsRegular() {
			continue
		}
		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, e.Name())
	}
	return removed, errors.Join(errs...)
}

// IsTemp reports whether name is one of Write's temporary file names.
func IsTemp(name string) bool {
	return strings.HasPrefix(name, ".") && strings.Contains(name, ".tmp-")
}
