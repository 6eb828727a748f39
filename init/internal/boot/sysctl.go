package boot

import (
	"context"
	"fmt"
	"os"
	"path"
	"strconv"
	"strings"
)

// RaiseSysctl raises a /proc/sys value to at least Min; a larger value is left alone.
type RaiseSysctl struct {
	Name string // e.g. "fs/nr_open"
	Min  int64
}

func (r RaiseSysctl) String() string {
	return fmt.Sprintf("sysctl %s >= %d", strings.ReplaceAll(r.Name, "/", "."), r.Min)
}

// Run reads the value and writes Min when the value is lower.
func (r RaiseSysctl) Run(_ context.Context, sys *Sys) error {
	p := sys.Path(path.Join("/proc/sys", r.Name))
	b, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	cur, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	if cur >= r.Min {
		return fmt.Errorf("%w: %s is %d already", ErrSkipped, r.Name, cur)
	}
	return os.WriteFile(p, []byte(strconv.FormatInt(r.Min, 10)), 0)
}
