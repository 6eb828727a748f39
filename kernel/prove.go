package kernel

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// Requests are the settings the fragments ask for, one per symbol.
type Requests struct {
	list  []Setting
	index map[string]int
}

// Settings returns the requests in fragment order.
func (r *Requests) Settings() []Setting { return r.list }

// MergeFragments reads fragment files in order. A symbol requested twice with the same value is
// fine; with two different values it is a conflict, reported with both places. All conflicts and
// parse errors are reported together.
func MergeFragments(paths []string) (*Requests, error) {
	r := &Requests{index: map[string]int{}}
	var errs []error
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			errs = append(errs, fmt.Errorf("open fragment: %w", err))
			continue
		}
		settings, err := ParseConfig(f, p)
		f.Close()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, s := range settings {
			i, seen := r.index[s.Symbol]
			if !seen {
				r.index[s.Symbol] = len(r.list)
				r.list = append(r.list, s)
				continue
			}
			if prev := r.list[i]; prev.Value != s.Value {
				errs = append(errs, fmt.Errorf("%s: CONFIG_%s requested as %s, but %s requests %s: keep one value",
					s.Where(), s.Symbol, s.Value, prev.Where(), prev.Value))
			}
		}
	}
	return r, errors.Join(errs...)
}

// Allowlist maps a symbol to the written reason why its request may not survive.
type Allowlist map[string]string

// ParseAllowlist reads "CONFIG_NAME reason..." lines; '#' starts a comment line. A line without a
// reason is an error: the allow-list is an escape that must say why.
func ParseAllowlist(r io.Reader, file string) (Allowlist, error) {
	a := Allowlist{}
	err := scanSymbolLines(r, file, func(n int, sym, name, rest string) error {
		if strings.TrimSpace(rest) == "" {
			return fmt.Errorf("%s:%d: %s has no reason: write why it may differ after the name", file, n, sym)
		}
		a[name] = strings.TrimSpace(rest)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return a, nil
}

// scanSymbolLines reads an allow-list: blank lines and '#' comment lines are skipped, every other
// line starts with CONFIG_NAME. line gets the line number, the first word (sym), the name after
// CONFIG_ and the rest of the line; its errors and every malformed name are joined. A read error
// is returned alone.
func scanSymbolLines(r io.Reader, file string, line func(n int, sym, name, rest string) error) error {
	var errs []error
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		sym, rest, _ := strings.Cut(text, " ")
		name, ok := strings.CutPrefix(sym, "CONFIG_")
		if !ok || name == "" {
			errs = append(errs, fmt.Errorf("%s:%d: %q must start with CONFIG_NAME", file, n, sym))
			continue
		}
		if err := line(n, sym, name, rest); err != nil {
			errs = append(errs, err)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read %s: %w", file, err)
	}
	return errors.Join(errs...)
}

// Explainer says why a symbol could not take a value (its unmet dependencies). The Kconfig reader
// implements it; nil means no explanation.
type Explainer interface {
	Explain(sym, want string, final Config) string
}

// Unmet is one requested symbol whose value did not survive.
type Unmet struct {
	Request Setting
	Got     string
	Why     string
}

func (u Unmet) Error() string {
	msg := fmt.Sprintf("%s: CONFIG_%s requested %s, final .config has %s",
		u.Request.Where(), u.Request.Symbol, u.Request.Value, describe(u.Got))
	if u.Why != "" {
		msg += "; " + u.Why
	}
	return msg
}

func describe(v string) string {
	if v == NotSet {
		return "it not set"
	}
	return v
}

// ProofError lists every request that did not survive.
type ProofError struct{ Unmet []Unmet }

func (e *ProofError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "kernel config proof failed: %d requested option(s) did not survive olddefconfig", len(e.Unmet))
	for _, u := range e.Unmet {
		b.WriteString("\n  ")
		b.WriteString(u.Error())
	}
	b.WriteString("\n  fix the fragment (enable the dependency too), or add the symbol to the allow-list with a reason")
	return b.String()
}

// Prove checks every request against the final config. Allow-listed symbols are skipped; an
// allow-list entry for a symbol that is not requested, or whose request now survives, is reported
// as stale so the list cannot rot.
func Prove(req *Requests, final Config, allow Allowlist, ex Explainer) error {
	var unmet []Unmet
	var errs []error
	for _, s := range req.list {
		got := final.Value(s.Symbol)
		ok := got == s.Value
		if _, listed := allow[s.Symbol]; listed {
			if ok {
				errs = append(errs, fmt.Errorf("allow-list entry CONFIG_%s is stale: %s now survives; remove the entry", s.Symbol, s.Where()))
			}
			continue
		}
		if ok {
			continue
		}
		u := Unmet{Request: s, Got: got}
		if ex != nil {
			u.Why = ex.Explain(s.Symbol, s.Value, final)
		}
		unmet = append(unmet, u)
	}
	for _, sym := range sortedKeys(allow) {
		if _, requested := req.index[sym]; !requested {
			errs = append(errs, fmt.Errorf("allow-list entry CONFIG_%s names a symbol no fragment requests; remove it", sym))
		}
	}
	if len(unmet) > 0 {
		errs = append([]error{&ProofError{Unmet: unmet}}, errs...)
	}
	return errors.Join(errs...)
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	return sortedCopy(keys)
}
