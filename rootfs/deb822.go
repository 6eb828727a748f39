package rootfs

import (
	"bufio"
	"fmt"
	"io"
	"sort"
	"strings"
)

// parseDeb822 reads blank-line separated stanzas of "Field: value" lines, with continuation lines
// starting with white space and comment lines starting with '#'. Field names are lower-cased.
func parseDeb822(r io.Reader) ([]map[string]string, error) {
	var (
		out   []map[string]string
		cur   map[string]string
		field string
	)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "#"):
		case strings.TrimSpace(line) == "":
			cur, field = nil, ""
		case line[0] == ' ' || line[0] == '\t':
			if cur == nil || field == "" {
				return nil, fmt.Errorf("line %d: continuation line outside a field", n)
			}
			cur[field] += "\n" + strings.TrimSpace(line)
		default:
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				return nil, fmt.Errorf("line %d: %q is not \"Field: value\"", n, line)
			}
			if cur == nil {
				cur = map[string]string{}
				out = append(out, cur)
			}
			field = strings.ToLower(strings.TrimSpace(k))
			cur[field] = strings.TrimSpace(v)
		}
	}
	return out, sc.Err()
}

// ParsePackages reads deb822 stanzas with Package, Version and Architecture fields, as in
// var/lib/dpkg/status or the output of dpkg-deb --field, and returns them sorted by name.
func ParsePackages(r io.Reader) ([]Package, error) {
	stanzas, err := parseDeb822(r)
	if err != nil {
		return nil, fmt.Errorf("parse package list: %w", err)
	}
	var out []Package
	for i, st := range stanzas {
		p := Package{Name: st["package"], Version: st["version"], Arch: st["architecture"]}
		if p.Name == "" || p.Version == "" {
			return nil, fmt.Errorf("parse package list: stanza %d has no Package or Version field", i+1)
		}
		if status := st["status"]; status != "" && !strings.HasSuffix(status, " installed") {
			continue
		}
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}
