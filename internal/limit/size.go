package limit

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

var units = []struct {
	suffix string
	shift  uint
}{{"TiB", 40}, {"GiB", 30}, {"MiB", 20}, {"KiB", 10}, {"B", 0}}

var errSize = errors.New(`a size is bytes or a whole number of KiB, MiB, GiB or TiB, e.g. "512MiB", "4GiB" or "1048576"`)

// ParseSize reads a size: plain bytes ("1048576") or a whole number with a binary unit ("512MiB",
// "4GiB"). Decimal units (MB, GB) are refused, since they differ from what cgroup files report.
func ParseSize(s string) (int64, error) {
	s = strings.TrimSpace(s)
	shift := uint(0)
	for _, u := range units {
		if num, ok := strings.CutSuffix(s, u.suffix); ok {
			s, shift = strings.TrimSpace(num), u.shift
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		if _, ferr := strconv.ParseFloat(s, 64); ferr == nil && err != nil {
			return 0, fmt.Errorf("%q: %w", s, errSize)
		}
		return 0, errSize
	}
	if n > math.MaxInt64>>shift {
		return 0, fmt.Errorf("%d<<%d overflows: %w", n, shift, errSize)
	}
	return n << shift, nil
}

// FormatSize writes bytes with the largest binary unit that divides them ("4GiB", "1536MiB",
// "1000").
func FormatSize(n int64) string {
	if n == 0 {
		return "0"
	}
	for _, u := range units[:4] {
		if n%(1<<u.shift) == 0 {
			return strconv.FormatInt(n>>u.shift, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}
