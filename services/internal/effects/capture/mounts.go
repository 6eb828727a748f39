package capture

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/allox-os/allox/services/internal/effects/evidence"
)

// Mounts captures the mount table of path (normally /proc/1/mountinfo).
func Mounts(path string) *evidence.Snapshot {
	f, err := os.Open(path)
	if err != nil {
		return unconfirmed(err.Error())
	}
	defer f.Close()
	items, err := ParseMountinfo(f)
	if err != nil {
		return unconfirmed(path + ": " + err.Error())
	}
	return &evidence.Snapshot{Items: items}
}

// ParseMountinfo normalizes a mountinfo table: one item per mount, keyed by
// mount point (a mount stacked over an earlier one at the same point gets
// " #2", " #3", ...), valued by fs type, source, root, options and
// propagation type. Mount ids, parent ids, device numbers and peer group
// numbers are left out: the kernel reassigns them.
func ParseMountinfo(r io.Reader) ([]evidence.Item, error) {
	var items []evidence.Item
	seen := map[string]int{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		a, b := strings.Fields(pre), strings.Fields(post)
		if !ok || len(a) < 6 || len(b) < 3 {
			return nil, fmt.Errorf("malformed mountinfo line %q", sc.Text())
		}
		point := a[4]
		seen[point]++
		key := point
		if n := seen[point]; n > 1 {
			key = fmt.Sprintf("%s #%d", point, n)
		}
		items = append(items, evidence.Item{Key: key, Value: fmt.Sprintf(
			"fstype=%s source=%s root=%s opts=%s super=%s propagation=%s",
			b[0], b[1], a[3], a[5], b[2], propagation(a[6:]))})
	}
	return items, sc.Err()
}

// propagation reduces mountinfo's optional fields to their kinds.
func propagation(optional []string) string {
	var kinds []string
	for _, o := range optional {
		kind, _, _ := strings.Cut(o, ":")
		kinds = append(kinds, kind)
	}
	if len(kinds) == 0 {
		return "private"
	}
	return strings.Join(kinds, ",")
}
