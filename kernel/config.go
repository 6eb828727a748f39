package kernel

import (
	"bufio"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"
)

// NotSet is the value a symbol has when it is off ("# CONFIG_X is not set", or requested as =n).
const NotSet = "n"

// Setting is one symbol's value and where it was written.
type Setting struct {
	Symbol string // without the CONFIG_ prefix
	Value  string // y, m, n (NotSet), a number, or a quoted string as written
	File   string
	Line   int
}

// Where is "file:line".
func (s Setting) Where() string { return fmt.Sprintf("%s:%d", s.File, s.Line) }

// String renders the setting the way a .config line does.
func (s Setting) String() string {
	if s.Value == NotSet {
		return fmt.Sprintf("# CONFIG_%s is not set", s.Symbol)
	}
	return fmt.Sprintf("CONFIG_%s=%s", s.Symbol, s.Value)
}

var (
	setRE    = regexp.MustCompile(`^CONFIG_([A-Za-z0-9_]+)=(.*)$`)
	notSetRE = regexp.MustCompile(`^# CONFIG_([A-Za-z0-9_]+) is not set$`)
)

// ParseConfig reads a .config or a fragment. Comments and blank lines are skipped; "# CONFIG_X is
// not set" and "CONFIG_X=n" both mean NotSet. Any other line is an error naming file and line.
func ParseConfig(r io.Reader, file string) ([]Setting, error) {
	var out []Setting
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if m := notSetRE.FindStringSubmatch(line); m != nil {
			out = append(out, Setting{Symbol: m[1], Value: NotSet, File: file, Line: n})
			continue
		}
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		m := setRE.FindStringSubmatch(line)
		if m == nil {
			return nil, fmt.Errorf("%s:%d: %q is not a config line (want CONFIG_NAME=value or \"# CONFIG_NAME is not set\")", file, n, line)
		}
		v := m[2]
		if v == "" {
			return nil, fmt.Errorf("%s:%d: CONFIG_%s has an empty value (write CONFIG_%s=n to turn it off)", file, n, m[1], m[1])
		}
		if strings.HasPrefix(v, `"`) && (len(v) < 2 || !strings.HasSuffix(v, `"`)) {
			return nil, fmt.Errorf("%s:%d: CONFIG_%s: unterminated string %s", file, n, m[1], v)
		}
		out = append(out, Setting{Symbol: m[1], Value: v, File: file, Line: n})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", file, err)
	}
	return out, nil
}

// Config is a final kernel configuration: symbol → value (NotSet for "is not set").
type Config map[string]string

// ConfigOf indexes parsed settings; a later setting wins, as in Kconfig.
func ConfigOf(settings []Setting) Config {
	c := Config{}
	for _, s := range settings {
		c[s.Symbol] = s.Value
	}
	return c
}

// Value returns the symbol's value, NotSet when absent.
func (c Config) Value(sym string) string {
	if v, ok := c[sym]; ok {
		return v
	}
	return NotSet
}

// Render writes settings as a config fragment, sorted by symbol, for KCONFIG_ALLCONFIG.
func Render(w io.Writer, settings []Setting) error {
	sorted := append([]Setting(nil), settings...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Symbol < sorted[j].Symbol })
	for _, s := range sorted {
		if _, err := fmt.Fprintln(w, s.String()); err != nil {
			return err
		}
	}
	return nil
}
