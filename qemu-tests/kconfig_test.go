package qemutests

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// kconfig maps a CONFIG_ symbol to its value as written in a .config: y, m, n, 64, "allox".
type kconfig map[string]string

var (
	kconfigSet   = regexp.MustCompile(`^(CONFIG_[A-Za-z0-9_]+)=(.*)$`)
	kconfigUnset = regexp.MustCompile(`^# (CONFIG_[A-Za-z0-9_]+) is not set$`)
)

// kconfigLine is one symbol assignment and where it was written.
type kconfigLine struct {
	Symbol, Value string
	Line          int
}

// parseKconfig reads a .config or a fragment. "# CONFIG_X is not set" reads as CONFIG_X=n; other
// comments and blank lines are skipped; anything else is an error naming the line.
func parseKconfig(r io.Reader) ([]kconfigLine, error) {
	var out []kconfigLine
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if m := kconfigUnset.FindStringSubmatch(line); m != nil {
			out = append(out, kconfigLine{m[1], "n", n})
			continue
		}
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		m := kconfigSet.FindStringSubmatch(line)
		if m == nil {
			return nil, fmt.Errorf("line %d: %q is neither CONFIG_X=value nor a comment", n, line)
		}
		out = append(out, kconfigLine{m[1], m[2], n})
	}
	return out, sc.Err()
}

// liveConfig is the final .config: the last assignment of a symbol wins, as in Kconfig.
func liveConfig(text string) (kconfig, error) {
	lines, err := parseKconfig(strings.NewReader(text))
	if err != nil {
		return nil, err
	}
	c := kconfig{}
	for _, l := range lines {
		c[l.Symbol] = l.Value
	}
	return c, nil
}

// kconfigRequest is a symbol value requested by a fragment.
type kconfigRequest struct {
	Symbol, Value, Source string // Source is file:line
}

// readFragments parses every *.conf in dir in name order and fails on a symbol requested twice
// with different values.
func readFragments(dir string) ([]kconfigRequest, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.conf"))
	if err != nil || len(paths) == 0 {
		return nil, fmt.Errorf("no kernel fragments in %s (%v)", dir, err)
	}
	sort.Strings(paths)
	var reqs []kconfigRequest
	seen := map[string]kconfigRequest{}
	var conflicts []string
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return nil, err
		}
		lines, err := parseKconfig(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		for _, l := range lines {
			r := kconfigRequest{l.Symbol, l.Value, fmt.Sprintf("%s:%d", filepath.Base(p), l.Line)}
			if prev, ok := seen[r.Symbol]; ok && prev.Value != r.Value {
				conflicts = append(conflicts, fmt.Sprintf("%s=%s (%s) vs %s (%s)", r.Symbol, prev.Value, prev.Source, r.Value, r.Source))
			}
			seen[r.Symbol] = r
			reqs = append(reqs, r)
		}
	}
	if len(conflicts) > 0 {
		return nil, fmt.Errorf("conflicting fragment requests:\n  %s", strings.Join(conflicts, "\n  "))
	}
	return reqs, nil
}

// missingRequests lists every request the live config does not honour: =n must be absent or
// "is not set", anything else must be there with exactly the requested value.
func missingRequests(reqs []kconfigRequest, live kconfig) []string {
	var bad []string
	for _, r := range reqs {
		got, ok := live[r.Symbol]
		switch {
		case r.Value == "n" && (!ok || got == "n"):
		case r.Value != "n" && ok && got == r.Value:
		case !ok:
			bad = append(bad, fmt.Sprintf("%s=%s (%s): absent from the running kernel", r.Symbol, r.Value, r.Source))
		default:
			bad = append(bad, fmt.Sprintf("%s=%s (%s): running kernel has %s", r.Symbol, r.Value, r.Source, got))
		}
	}
	return bad
}
